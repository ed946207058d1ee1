"""One module per tab of the workbench; each exposes `build(services)`, called inside its `gr.Tab`."""
