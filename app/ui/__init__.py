"""The Gradio workbench: the Blocks builder (`blocks`), one module per tab (`tabs`), the views that format
service results (`views`), the named API (`api`) and the login guard (`login`). It draws and calls the
services of `reflectrm_app`; only `reflectrm app` imports it.
"""
