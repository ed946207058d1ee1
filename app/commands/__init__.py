"""The `reflectrm` command's sub-commands, one module each over the library, the store and the app's services.

    judge.py      judge          one pair, or a file of pairs
    evaluate.py   eval, compare  benchmarks and labelled files, stored and compared
    serve.py      serve          the judge as an HTTP reward model
    workbench.py  app            the Gradio workbench (the only command that imports the UI, lazily)
    store.py      import, export, db ...
    train.py      build-data, train, train-status
    rounds.py     reviewers, round   review rounds: reviewers and roles, open, progress, agreement, adjudicate, export
    reference.py  writes docs/cli.md from every parser's --help

    options.py    the options commands share, each defined once (--db, the judging and backend flags, access)
    running.py    how a command runs: failures as one line and exit 2, escaped output, a closed pipe

`reflectrm_app.cli` assembles them into one parser; a module whose extra is not installed is left out.
"""
