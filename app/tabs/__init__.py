"""One module per tab of the workbench; `reflectrm_app.ui` assembles them from `reflectrm_app.tabs.TABS`."""
