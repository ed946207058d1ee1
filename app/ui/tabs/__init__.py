"""One module per tab of the workbench; `reflectrm_app.ui.blocks` assembles them from `reflectrm_app.ui.tabs.TABS`."""
