"""Retraining the judge (PAPER.md sections 2-3): data construction and GRPO with TRL.

* `recipe`: the one recipe (pure): analyses -> preference examples and reflection pairs -> the rows
  trained on, and their hash (a snapshot's identity). The store derives corrections with it too.
* `data`: rollouts on labelled pairs -> the recipe's examples, mixed 4:1 (`DataConfig` names the
  mix's choices), deduplicated, checked against an evaluation set, written as a content-hashed snapshot.
* `rewards`: reward functions in TRL's calling convention.
* `grpo`: `TrainConfig` (the paper's defaults) and `train`, a resumable, cancellable run.
* `runs` / `jobs`: the run folder, and runs as background processes to start, watch and cancel.
* `cli`: `reflectrm build-data`, `reflectrm train`, `reflectrm train-status`.

Importing this package loads no heavy module; torch, transformers, trl, peft and datasets load
inside the functions that need them.
"""

from reflectrm.training.data import BuildReport, DataConfig, TrainingExample, TrainingSet
from reflectrm.training.grpo import TrainConfig, TrainResult
from reflectrm.training.rewards import accuracy_reward, format_reward
from reflectrm.training.runs import Checkpoint, RunProgress, list_checkpoints, read_progress

__all__ = [
    "BuildReport",
    "Checkpoint",
    "DataConfig",
    "RunProgress",
    "TrainConfig",
    "TrainResult",
    "TrainingExample",
    "TrainingSet",
    "accuracy_reward",
    "format_reward",
    "list_checkpoints",
    "read_progress",
]
