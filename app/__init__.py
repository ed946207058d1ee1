"""The outer shell: the `reflectrm` command and the Gradio workbench."""
