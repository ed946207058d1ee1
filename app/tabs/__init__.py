"""One module per tab of the workbench; `app.ui` assembles them from `app.tabs.TABS`."""
