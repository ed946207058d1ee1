"""The demo judges' build tools: not installed, run from the repository root.

    python -m research.demojudge.steps_build --out DIR ...   # a running-sum judge (one stage, or --recipe)
    python -m research.demojudge.build --out DIR ...         # the first, arithmetic judge
    python -m research.demojudge.replay --out DIR            # rebuild a judge from its card's recorded stages

`careless_stages.json` is the plan of the careless judge's first four stages (a replay's --stages). What
the installed package needs of a build (which problems it trained on, so which pairs are held out) is
`reflectrm.demo.heldout`; these tools render the same lessons into tokens and train on them.
"""
