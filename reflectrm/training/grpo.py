"""GRPO training of the judge with TRL (PAPER.md section 3).

    result = train("data/demo-1a2b3c4d5e6f", model="Qwen/Qwen3-4B", output_dir=Path("runs/r1"), config=TrainConfig())

One run, both tasks mixed (the paper's unified training): `GRPOTrainer` samples a group of
`num_generations` completions per prompt at `temperature`, rewards each with
`reflectrm.training.rewards` (1 when the parsed verdict matches the label) and updates the policy.
The run folder (`reflectrm.training.runs`) gets its status, a metrics JSONL, recent completions and
checkpoints that `reflectrm judge --model` loads; a rerun resumes from the last checkpoint; a stop
event, a `cancel` file or SIGTERM (in a worker) ends it cleanly at the next step, with a checkpoint.

Several processes (CPUs, GPUs or nodes): launch the same command under `torchrun` or `accelerate launch` (the
configs in `reflectrm/training/configs/`, see configs/README.md). Rank 0 alone writes the run folder and reports;
every process stops after the same step; a run resumes only on the number of processes that trained it
(`reflectrm.training.launch`). Heavy imports happen inside functions.
"""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import math
import os
import re
import shutil
import threading
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from types import MappingProxyType
from typing import Any

from reflectrm.backends.preflight import check_device_available, check_model_folder
from reflectrm.core.config import check_positive_int, check_seed, counting, seed_number, strict_from_dict
from reflectrm.defaults import check_threads
from reflectrm.errors import ConfigError, DiskFull, InputError, require
from reflectrm.files.locks import exclusive
from reflectrm.training.launch import Processes, launched
from reflectrm.training.rewards import MIN_ANALYSIS_CHARS, REWARDS, completion_text
from reflectrm.training.runs import (
    RunFiles,
    check_checkpoint,
    check_processes,
    last_checkpoint,
    now_iso,
    process_start,
)

log = logging.getLogger(__name__)

MODULE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.]{0,199}")
"""How a module LoRA adapts is named (q_proj, or a dotted path such as mlp.down_proj)."""
LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


TIME_DECAY = "linear-time"  # TrainConfig.lr_scheduler: linear decay to 0 over the time budget


MAX_GROUP = 64
"""The most completions GRPO samples per prompt (`num_generations`): a group is generated together, so its KV cache
and logits grow with it (a group of 100,000 grew until the OOM killer ended the run); the paper uses 8."""
MAX_COMPLETION_TOKENS = 32768  # max_completion_length: past any judge's analysis, and a group's cache grows with it
MAX_STEPS = 10**9  # step counts (max_steps, save_steps, logging_steps): a trillion steps is a typo, not a plan
MAX_LORA_R = 1024  # a rank past the model's width adds nothing but memory (the paper's LoRA-free runs need none)


def _number(value: Any) -> bool:
    """A real, finite number (not a bool, nan or inf): what every numeric training option must be first."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _whole(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


NUMBER_RULES: Mapping[str, tuple[Any, str]] = MappingProxyType({
    # field: (the check, after `_number`; what the message asks for)
    "learning_rate": (lambda v: 0 < v <= 1, "a finite number > 0 and at most 1 (paper: 1e-6)"),
    "temperature": (lambda v: 0 < v <= 100, "a finite number > 0 and at most 100 (GRPO samples; paper: 1.0)"),
    "epochs": (lambda v: 0 <= v <= 1e6, "a finite number of passes from 0 to 1,000,000 (paper: 3)"),
    "warmup_steps": (lambda v: v >= 0 and (v < 1 or float(v).is_integer()),
                     "a finite number >= 0: a whole number of steps, or a share of them below 1 (0: no warm-up)"),
    "weight_decay": (lambda v: 0 <= v <= 1, "a finite number from 0 to 1 (AdamW's decoupled decay; 0: none)"),
    "max_grad_norm": (lambda v: v >= 0, "a finite number >= 0 (0: no gradient clipping)"),
    "lora_dropout": (lambda v: 0 <= v < 1, "a share from 0 up to (not including) 1 (1 drops the whole LoRA path)"),
    "vllm_gpu_memory_utilization": (lambda v: 0 < v <= 1, "a share of each GPU's memory above 0 and at most 1"),
})
"""The numeric `TrainConfig` options TRL, transformers and peft take unchecked (a negative warm-up, a LoRA dropout of
2), with their bounds: checked when the config is made, never first inside the trainer."""

WHOLE_RULES: Mapping[str, tuple[int, int, str]] = MappingProxyType({
    # field: (least, most, why the most)
    "num_generations": (2, MAX_GROUP, "GRPO compares a group of completions per prompt and generates it at once, so "
                                      "memory grows with it (paper: 8)"),
    "batch_size": (1, 1 << 16, "prompts per optimizer step (paper: 64)"),
    "per_device_batch_size": (1, 1 << 16, "completions per forward/backward pass"),
    "max_completion_length": (1, MAX_COMPLETION_TOKENS, "tokens per completion (paper: 1024)"),
    "save_steps": (1, MAX_STEPS, "steps between checkpoints"),
    "logging_steps": (1, MAX_STEPS, "steps between metrics lines"),
    "lora_r": (1, MAX_LORA_R, "the LoRA rank; a rank past the model's width adds nothing but memory"),
    "lora_alpha": (1, 1 << 16, "the LoRA scaling numerator"),
    "completions_to_record": (0, 1000, "sampled completions kept per step for watchers"),
    "min_analysis_chars": (0, 1 << 20, "0: no format requirement"),
})
"""The whole-number `TrainConfig` options, with the range each may take."""


LOSS_TYPES = ("grpo", "dr_grpo", "dapo", "bnpo", "cispo", "sapo")
"""TRL 1.16 `GRPOConfig.loss_type` values that run with this module's other settings ("luspo" and "vespo" need an
importance-sampling level it does not set). TRL itself checks the value only when the first loss is computed."""

OBJECTIVES: Mapping[str, Mapping[str, Any]] = MappingProxyType({
    "trl": MappingProxyType({"beta": 0.0, "loss_type": "dapo"}),  # TRL 1.16's defaults: no KL term, token-level loss
    # Shao et al. 2024 (DeepSeekMath): KL to the reference with beta 0.04, each sequence's token mean, then the group's
    "original-grpo": MappingProxyType({"beta": 0.04, "loss_type": "grpo"}),
})
"""Named (beta, loss_type) settings: `TrainConfig.objective(name)`, `reflectrm train --objective NAME`."""


@dataclass(frozen=True, slots=True, kw_only=True)
class TrainConfig:
    """One GRPO run. Defaults are the paper's for real models (PAPER.md 3); the rest are named choices."""

    learning_rate: float = 1e-6  # paper: 1e-6
    batch_size: int = 64  # prompts per optimizer step (paper: 64); the step sees batch_size x num_generations completions
    num_generations: int = 8  # GRPO group size per prompt (paper: N = 8 rollouts)
    temperature: float = 1.0  # sampling temperature of the group (paper: 1.0)
    epochs: float = 3.0  # passes over the data (paper: 3)
    max_steps: int = -1  # > 0: stop after this many optimizer steps instead (overrides epochs)
    max_time_s: float | None = None  # stop (completed, with a checkpoint) after the step that passes this budget
    max_completion_length: int = 1024  # paper: max generation length 1024 tokens
    per_device_batch_size: int = 8  # completions per forward/backward pass; gradient accumulation makes up the rest
    # The paper states no reward formula, KL term or clip. beta: KL coefficient against the frozen starting model
    # (TRL's default 0 loads no reference model; DeepSeek-R1 used 0.001, the original GRPO 0.04).
    beta: float = 0.0
    # How token losses are aggregated (TRL 1.16's GRPOConfig.loss_type, default "dapo": over the batch's active
    # tokens). "grpo" is the original GRPO loss (each sequence's mean, then the group's), with its length bias.
    loss_type: str = "dapo"
    # advantage normalisation: "group" (GRPO), "batch" or "none"; in both orders "group" scales over the step
    # instead (a group's own spread would divide out the other order's share that the reward pays)
    scale_rewards: str = "group"
    reward_weights: Mapping[str, float] = (("accuracy", 1.0),)  # reward name -> weight; add ("format", w) for a format reward
    # The format requirement: the accuracy and format rewards pay only after an analysis of at least this many
    # characters, so GRPO cannot learn to skip the analyses stage 2 compares (0: the verdict alone is paid)
    min_analysis_chars: int = MIN_ANALYSIS_CHARS
    # paper: unstated; constant keeps short runs comparable. Any transformers scheduler name, or "linear-time":
    # linear decay to 0 over max_time_s, for a run bounded by time, whose step count is not known in advance.
    lr_scheduler: str = "constant"
    warmup_steps: float = 0.0  # steps (or a fraction of them when < 1)
    weight_decay: float = 0.0  # AdamW weight decay (paper: unstated)
    max_grad_norm: float = 1.0  # gradient clipping norm (paper: unstated)
    lora: bool = False  # train a LoRA adapter (peft) instead of every weight; final/ holds the merged model
    lora_r: int = field(default=16, metadata={"parse": counting})  # LoRA rank (at least 1)
    lora_alpha: int = 32  # LoRA scaling numerator (the update is scaled by alpha / r)
    lora_dropout: float = 0.05  # dropout on the LoRA path
    lora_target_modules: tuple[str, ...] = LORA_TARGETS  # the projections that get adapters (Qwen3 names)
    use_vllm: bool = False  # generate with vLLM (GPU machines; TRL's "colocate" mode shares the training GPUs)
    vllm_mode: str = "colocate"  # "colocate", or "server" with `trl vllm-serve` on other GPUs
    vllm_gpu_memory_utilization: float = 0.3  # colocate: the share of each GPU vLLM may take
    vllm_server_url: str | None = None  # server mode: where `trl vllm-serve` listens (None: http://localhost:8000)
    device: str = "auto"  # "auto" (CUDA when available), "cpu", "cuda"
    bf16: bool | None = None  # None: bf16 on CUDA, fp32 on CPU; True on a CPU: fp32 weights, bf16 autocast
    threads: int | None = None  # torch CPU threads while training (None: torch's default); 1 wins on a busy machine
    gradient_checkpointing: bool = True  # trade compute for memory (off for tiny models)
    save_steps: int = 50  # checkpoint every N steps (and at the end, and on cancel)
    save_total_limit: int | None = 3  # keep the newest N checkpoints (None: all)
    logging_steps: int = 1  # a metrics line every N steps
    completions_to_record: int = 4  # sampled completions kept per step for watchers
    seed: int = field(default=0, metadata={"parse": seed_number})  # seeds data order, sampling and initialisation
    # Position bias trained away (J1's consistency reward, arXiv 2505.10320): each example is rolled out in the same
    # step as its other order (responses, or a reflection pair's critiques, exchanged) and the outcome reward pays a
    # right verdict the share of right verdicts in the other order (advantages scaled over the step). Needs data
    # written in both orders (the Train tab writes it; `reflectrm export training --both-orders`) and an even
    # batch_size.
    both_orders: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "reward_weights", dict(self.reward_weights))
        object.__setattr__(self, "lora_target_modules", tuple(self.lora_target_modules))
        self._check_numbers()
        check_seed("seed", self.seed)
        if self.threads is not None:
            check_positive_int("threads", self.threads)
        if self.max_time_s is not None and not (_number(self.max_time_s) and self.max_time_s > 0):
            raise ConfigError(f"max_time_s must be a finite number of seconds > 0 (or None: no budget), "
                              f"got {self.max_time_s!r}")
        if not _whole(self.max_steps) or not (self.max_steps == -1 or 1 <= self.max_steps <= MAX_STEPS):
            # 0 and other negatives used to mean "all epochs" silently
            raise ConfigError(f"max_steps must be a whole number from 1 to {MAX_STEPS:,} (or -1: run for `epochs`), "
                              f"got {self.max_steps!r}")
        if self.max_steps == -1 and not self.epochs > 0:
            raise ConfigError(f"epochs must be > 0 when max_steps is unset, got {self.epochs!r}")
        if self.max_steps > 0 and self.warmup_steps >= 1 and self.warmup_steps > self.max_steps:
            raise ConfigError(f"warmup_steps ({self.warmup_steps:g}) is longer than the run (max_steps "
                              f"{self.max_steps}): lower --warmup-steps, or give a share below 1")
        if self.both_orders and self.batch_size % 2:
            raise ConfigError(f"both_orders rolls out an example and its other order in one step: batch_size must be "
                              f"even, got {self.batch_size}")
        if self.save_total_limit is not None and not (_whole(self.save_total_limit) and self.save_total_limit >= 1):
            raise ConfigError(f"save_total_limit must be a whole number >= 1 (or None: keep every checkpoint), "
                              f"got {self.save_total_limit!r}")
        self._check_names()

    def _check_numbers(self) -> None:
        """Every numeric option within its bounds (`NUMBER_RULES`, `WHOLE_RULES`): one line naming it and the range."""
        for name, (least, most, why) in WHOLE_RULES.items():
            value = getattr(self, name)
            if not (_whole(value) and least <= value <= most):
                raise ConfigError(f"{name} must be a whole number from {least} to {most:,}, got {value!r}: {why}")
        for name, (ok, wanted) in NUMBER_RULES.items():
            value = getattr(self, name)
            if not (_number(value) and ok(value)):
                raise ConfigError(f"{name} must be {wanted}, got {value!r}")
        if isinstance(self.beta, bool) or not (isinstance(self.beta, (int, float)) and 0 <= self.beta < math.inf):
            raise ConfigError(f"beta (the KL coefficient) must be a finite number >= 0 (0: no KL term), "
                              f"got {self.beta!r}")

    def _check_names(self) -> None:
        """The options that name something: rewards, the loss, the modules LoRA adapts, the device."""
        unknown = sorted(name for name in self.reward_weights if name not in REWARDS)
        if unknown or not self.reward_weights:
            raise ConfigError(f"reward_weights names {unknown or 'nothing'}: use names from {sorted(REWARDS)} "
                              "or a package.module:function")
        if self.lr_scheduler == TIME_DECAY and self.max_time_s is None:
            raise ConfigError(f"lr_scheduler {TIME_DECAY!r} decays over the time budget: set max_time_s too")
        if self.loss_type not in LOSS_TYPES:
            raise ConfigError(f"loss_type must be one of {', '.join(LOSS_TYPES)} (the original GRPO: 'grpo'; TRL's "
                              f"default: 'dapo'), got {self.loss_type!r}")
        if self.scale_rewards not in ("group", "batch", "none"):
            raise ConfigError(f"scale_rewards must be 'group', 'batch' or 'none', got {self.scale_rewards!r}")
        if self.vllm_mode not in ("colocate", "server"):
            raise ConfigError(f"vllm_mode must be 'colocate' or 'server', got {self.vllm_mode!r}")
        if not isinstance(self.device, str) or not re.fullmatch(r"auto|cpu|cuda(:\d{1,4})?", self.device):
            raise ConfigError(f"device must be auto, cpu, cuda or cuda:N, got {self.device!r}")
        bad = [m for m in self.lora_target_modules if not (isinstance(m, str) and MODULE_NAME.fullmatch(m))]
        if bad or not self.lora_target_modules:
            raise ConfigError(f"lora_target_modules must name one or more modules (e.g. q_proj,v_proj), got "
                              f"{(bad or ['nothing'])[0]!r}")

    @property
    def completions_per_step(self) -> int:
        return self.batch_size * self.num_generations

    def accumulation_steps(self, world_size: int = 1) -> int:
        """Gradient accumulation that makes one optimizer step see `completions_per_step` completions."""
        per_pass = self.per_device_batch_size * world_size
        if self.completions_per_step % per_pass:
            raise ConfigError(
                f"batch_size x num_generations = {self.completions_per_step} completions per step is not a multiple of "
                f"per_device_batch_size x processes = {per_pass}: change per_device_batch_size or batch_size"
            )
        return self.completions_per_step // per_pass

    def with_(self, **changes: Any) -> TrainConfig:
        return replace(self, **changes)

    def objective(self, name: str) -> TrainConfig:
        """This config with the (beta, loss_type) of a named objective in `OBJECTIVES` ("original-grpo")."""
        if name not in OBJECTIVES:
            raise ConfigError(f"objective must be one of {', '.join(OBJECTIVES)}, got {name!r}")
        return replace(self, **OBJECTIVES[name])

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["lora_target_modules"] = list(self.lora_target_modules)
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> TrainConfig:
        if "cpu_threads" in d:  # a run recorded before the field took the one spelling every command uses
            d = {**{k: v for k, v in d.items() if k != "cpu_threads"}, "threads": d["cpu_threads"]}
        return strict_from_dict(cls, d)


def resolve_device(device: str) -> str:
    if device != "auto":
        return device
    torch = require("torch", extra="train")
    return "cuda" if torch.cuda.is_available() else "cpu"


def grpo_args(config: TrainConfig, output_dir: Path, *, world_size: int = 1) -> Any:
    """The TRL `GRPOConfig` for `config` (one generation batch per optimizer step)."""
    trl = require("trl", extra="train")
    on_cpu = resolve_device(config.device) == "cpu"
    bf16 = (not on_cpu) if config.bf16 is None else config.bf16
    return trl.GRPOConfig(
        output_dir=str(output_dir),
        # TRL loads the policy (and vLLM's copy) in this dtype. On a CPU bf16 is mixed precision instead: fp32
        # weights (a small model's updates vanish in bf16 ones), bf16 matmuls under autocast (AMX / AVX512-BF16).
        model_init_kwargs={"dtype": "bfloat16" if bf16 and not on_cpu else "float32"},
        learning_rate=config.learning_rate,
        per_device_train_batch_size=config.per_device_batch_size,
        gradient_accumulation_steps=config.accumulation_steps(world_size),
        num_generations=config.num_generations,
        temperature=config.temperature,
        top_k=0, top_p=1.0,  # plain sampling, as the paper's rollouts
        max_completion_length=config.max_completion_length,
        num_train_epochs=config.epochs,
        max_steps=config.max_steps,
        beta=config.beta,
        loss_type=config.loss_type,
        scale_rewards=advantage_scale(config),
        reward_weights=list(config.reward_weights.values()),
        # under linear-time the run callback sets the rate each step over a constant schedule
        lr_scheduler_type="constant" if config.lr_scheduler == TIME_DECAY else config.lr_scheduler,
        warmup_steps=config.warmup_steps,
        weight_decay=config.weight_decay,
        max_grad_norm=config.max_grad_norm,
        use_vllm=config.use_vllm,
        vllm_mode=config.vllm_mode,
        vllm_gpu_memory_utilization=config.vllm_gpu_memory_utilization,
        vllm_server_base_url=config.vllm_server_url,
        use_cpu=on_cpu,
        bf16=bf16,
        gradient_checkpointing=config.gradient_checkpointing,
        save_strategy="steps",
        save_steps=config.save_steps,
        save_total_limit=config.save_total_limit,
        logging_steps=config.logging_steps,
        report_to="none",
        disable_tqdm=True,
        log_completions=False,
        remove_unused_columns=False,  # the reward functions read the label and task columns
        # both orders: the rows come as (example, other order) blocks in a seeded order (`twin_blocks`), kept in order
        # so that a step of an even number of prompts always holds both rows of a block
        shuffle_dataset=not config.both_orders,
        seed=config.seed,
        data_seed=config.seed,
    )


def check_lr_scheduler(name: str) -> None:
    """Refuse a learning-rate schedule transformers does not know, before a run folder or model is touched."""
    if name == TIME_DECAY:
        return
    from transformers.trainer_utils import SchedulerType  # late: a config must not import transformers

    known = [s.value for s in SchedulerType]
    if name not in known:
        raise ConfigError(f"lr_scheduler {name!r} is unknown: use one of {', '.join(known)} or {TIME_DECAY}")


def check_run_folder(output_dir: str | Path) -> None:
    """Refuse a run folder path that is a file, or whose parent cannot be created or written."""
    root = Path(output_dir)
    if root.exists() and not root.is_dir():
        raise InputError(f"the run folder {str(root)!r} is a file: pass a folder path to --output")
    existing = next((p for p in (root, *root.parents) if p.exists()), Path("."))
    if not existing.is_dir():
        raise InputError(f"cannot create the run folder {str(root)!r}: {str(existing)!r} is a file")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise InputError(f"cannot write the run folder {str(root)!r}: {str(existing)!r} is not writable")


def check_train_inputs(data: str | Path, *, model: str, output_dir: str | Path, config: TrainConfig,
                       resume: bool = False) -> None:
    """Every precondition of a run that needs no weights loaded: checked before the run folder is made or touched.

    The launch (`launched`: a multi-process launch that started one process is refused); the device and the model
    folder are checked as a judge's are; with `resume`, the checkpoint it resumes from and that this launch has as
    many processes as trained it; with LoRA, that the model has the modules it names (from its config alone: no
    weights are read)."""
    processes = launched()
    check_run_folder(output_dir)
    check_lr_scheduler(config.lr_scheduler)
    check_model(model)
    check_device_available(config.device, name="--device")
    config.accumulation_steps(processes.world_size)  # else TRL's ValueError, after the model loads
    if config.threads is not None:  # here, not in TrainConfig: a run made on a bigger machine still reads
        check_threads(config.threads, name="--threads")
    if not Path(data).is_dir():
        raise InputError(f"dataset {str(data)!r} does not exist: pass a folder written by `reflectrm build-data` "
                         "or an export with --format hf")
    if resume and (resumable := last_checkpoint(output_dir)) is not None:
        check_checkpoint(resumable)
        check_processes(resumable, processes=processes.world_size)
    if config.lora:
        check_lora_targets(model, config.lora_target_modules)
    if config.both_orders:
        from reflectrm.training.data import load_snapshot

        twin_blocks(load_snapshot(data), seed=config.seed)  # rows not in both orders: said before the run starts


def check_lora_targets(model: str, targets: Sequence[str]) -> None:
    """Refuse LoRA target modules the model lacks (peft's ValueError came after the model loaded), naming some it has.

    The model is built from its config on torch's meta device: module names without reading a weight."""
    torch = require("torch", extra="train")
    transformers = require("transformers", extra="train")
    from reflectrm.backends.transformers_backend import loading

    with loading(model, "config"):
        model_config = transformers.AutoConfig.from_pretrained(model)
    with torch.device("meta"):
        skeleton = transformers.AutoModelForCausalLM.from_config(model_config)
    from transformers.pytorch_utils import Conv1D  # GPT-2's linear layer, which peft adapts too

    adaptable = (torch.nn.Linear, torch.nn.Embedding, torch.nn.Conv1d, torch.nn.Conv2d, Conv1D)
    names = [n for n, m in skeleton.named_modules() if isinstance(m, adaptable)]
    missing = [t for t in targets if not any(n == t or n.endswith("." + t) for n in names)]
    if missing:
        short = sorted({n.rsplit(".", 1)[-1] for n in names})
        raise ConfigError(f"lora_target_modules names {missing[0]!r}, which model {model!r} lacks: use its layers "
                          f"that LoRA can adapt, such as {', '.join(short[:8])}")


def lora_config(config: TrainConfig) -> Any:
    peft = require("peft", extra="train")
    return peft.LoraConfig(r=config.lora_r, lora_alpha=config.lora_alpha, lora_dropout=config.lora_dropout,
                           target_modules=list(config.lora_target_modules), task_type="CAUSAL_LM")


def load_tokenizer(model: str) -> Any:
    transformers = require("transformers", extra="train")
    tokenizer = transformers.AutoTokenizer.from_pretrained(model)
    tokenizer.padding_side = "left"  # not persisted by transformers 5; generation needs left padding
    if tokenizer.chat_template is None:
        raise InputError(f"model {model!r} has no chat template: the judge prompts are chat messages")
    return tokenizer


def check_model(model: str) -> None:
    """Fail early, with the fix, on a model path that does not exist or a folder that lacks its config, tokenizer or
    weights (`ModelFolderError`, an `InputError`); a Hub id is left to the loader."""
    check_model_folder(model)


@dataclass(frozen=True, slots=True, kw_only=True)
class TrainResult:
    """How a run ended.

    Attributes:
        state: "completed" or "cancelled".
        step: optimizer steps done (over every start of the run).
        final_model: the exported model folder (completed runs), else None.
        last_checkpoint: the newest checkpoint folder, if any.
        metrics: the trainer's closing metrics (runtime, mean loss, ...).
        ended_by: what ended it: "steps" (its max_steps or epochs), "time budget" (max_time_s spent: a planned
            stop, completed with a final model) or "cancel" (a Stop, Ctrl-C, SIGTERM or the cancel file).
        processes: how many processes trained together (torchrun, accelerate launch; 1 without a launcher).
        main: whether this is the main process (rank 0), the one that wrote the run folder and reports the run;
            every other process of a launch gets a result with `main` False and says nothing.
    """

    state: str
    step: int
    final_model: Path | None
    last_checkpoint: Path | None
    metrics: Mapping[str, float]
    ended_by: str = "steps"
    processes: int = 1
    main: bool = True


def train(
    data: str | Path,
    *,
    model: str,
    output_dir: str | Path,
    config: TrainConfig,
    resume: bool = True,
    stop: threading.Event | None = None,
) -> TrainResult:
    """Run GRPO on a dataset snapshot; resumes from the run's last checkpoint when `resume`.

    The run folder records status, metrics and completions as it goes; a failure is recorded as
    `failed` with its error before the exception propagates.
    """
    check_train_inputs(data, model=model, output_dir=output_dir, config=config, resume=resume)
    files = RunFiles(Path(output_dir))
    processes = launched()  # under torchrun or accelerate launch every process runs this; rank 0 writes the folder
    main = processes.main
    with contextlib.ExitStack() as stack:
        if main:  # one run per folder: a second is refused before it writes its status over this one's
            stack.enter_context(exclusive(files.root, flag="the run folder", folder=True))
            files.cancel.unlink(missing_ok=True)
            files.update_status(state="starting", pid=os.getpid(), pid_start=process_start(os.getpid()), error="",
                                finished_at=None, finished_unix=None, processes=processes.world_size)
        else:
            files.root.mkdir(parents=True, exist_ok=True)
        try:
            result = _train(data, model=model, files=files, config=config, resume=resume,
                            stop=stop or threading.Event(), processes=processes)
        except BaseException as exc:
            failure = disk_full(exc, files) if main else None
            if main:
                _record_end(files, state="cancelled" if isinstance(exc, KeyboardInterrupt) else "failed",
                            error=str(failure) if failure else f"{type(exc).__name__}: {exc}"[:2000])
            if failure is not None:
                raise failure from exc
            raise
        if main:
            files.update_status(state=result.state, step=result.step, finished_at=now_iso(), finished_unix=_now(),
                                ended_by=result.ended_by,
                                final_model=str(result.final_model) if result.final_model else None)
    return result


def _record_end(files: RunFiles, *, state: str, error: str) -> None:
    """The run's outcome in its status; a disk too full even for that leaves the reason in the log instead."""
    try:
        files.update_status(state=state, error=error, finished_at=now_iso(), finished_unix=_now())
    except OSError as exc:
        log.error("could not record the run as %s (%s): %s", state, exc, error)


def disk_full(exc: BaseException, files: RunFiles) -> DiskFull | None:
    """A `DiskFull` naming the run folder and where a rerun resumes, when `exc` (or its cause) is a full disk.

    The half-written checkpoint or final model the failure left is removed first: it frees the space the status
    needs, and no later run or reader can take it for a whole one (`list_checkpoints` skips it already)."""
    if not _is_disk_full(exc):
        return None
    resumable = last_checkpoint(files.root)
    removed = remove_torn_saves(files.root, after=resumable.step if resumable else -1)
    resume = f"resume from {resumable.path.name}" if resumable else "start again"
    return DiskFull(f"the disk holding {str(files.root)!r} is full (no space left on device)"
                    f"{' while saving ' + ', '.join(removed) + ', removed' if removed else ''}: free space there "
                    f"and rerun the same command to {resume}")


def _is_disk_full(exc: BaseException | None) -> bool:
    seen = 0
    while exc is not None and seen < 8:  # the chain: safetensors and torch wrap the OSError in their own errors
        if (isinstance(exc, OSError) and exc.errno == errno.ENOSPC) or "No space left on device" in str(exc) \
                or "StorageFull" in str(exc):
            return True
        exc, seen = exc.__cause__ or exc.__context__, seen + 1
    return False


def remove_torn_saves(run_dir: Path, *, after: int) -> list[str]:
    """Remove checkpoint folders past step `after` that are not whole (no trainer_state.json) and a half-written
    final model; returns their names."""
    removed = []
    for path in sorted(run_dir.glob("checkpoint-*")):
        step = path.name.removeprefix("checkpoint-")
        if path.is_dir() and step.isdigit() and int(step) > after and not (path / "trainer_state.json").exists():
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path.name)
    partial = run_dir / "final.partial"
    if partial.exists():
        shutil.rmtree(partial, ignore_errors=True)
        removed.append(partial.name)
    return removed


def _now() -> float:
    import time

    return time.time()


def _train(data: str | Path, *, model: str, files: RunFiles, config: TrainConfig, resume: bool,
           stop: threading.Event, processes: Processes) -> TrainResult:
    from trl import GRPOTrainer

    from reflectrm.training.callbacks import ProcessCount, RunCallback
    from reflectrm.training.data import load_snapshot

    check_model(model)
    dataset = load_snapshot(data)
    if config.both_orders:
        dataset = twin_blocks(dataset, seed=config.seed)
    tokenizer = load_tokenizer(model)
    args = grpo_args(config, files.root, world_size=processes.world_size)
    resumable = last_checkpoint(files.root) if resume else None  # the newest complete one, not a half-saved one
    checkpoint = str(resumable.path) if resumable else None
    callback = RunCallback(files, stop, max_time_s=config.max_time_s, decay_over_time=config.lr_scheduler == TIME_DECAY)
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=[_recording(reward_function(name, config), files, config, record=i == 0 and processes.main)
                      for i, name in enumerate(config.reward_weights)],
        args=args,
        train_dataset=dataset,
        processing_class=tokenizer,
        peft_config=lora_config(config) if config.lora else None,
        callbacks=[callback, ProcessCount(processes.world_size)],
    )
    log.info("training %s on %s (%d rows), resuming from %s", model, data, len(dataset), checkpoint or "scratch")
    with _torch_threads(config):
        output = trainer.train(resume_from_checkpoint=checkpoint)
    step = trainer.state.global_step
    # every process stopped on the same decision (the callback's); a stop asked for after the last step's (during
    # the final save) still cancels here, as rank 0 reads it: no final model
    cancelled = callback.ended_by == "cancel" or stop.is_set() or (processes.main and files.cancel.exists())
    final = None if cancelled else export_final(trainer, tokenizer, files.final, meta={
        "base_model": model, "data": str(data), "config": config.to_dict(), "processes": processes.world_size,
        "step": step})
    _barrier()  # every process returns once rank 0's final model is written: none reports or exits before it
    newest = last_checkpoint(files.root)
    return TrainResult(state="cancelled" if cancelled else "completed", step=step, final_model=final,
                       last_checkpoint=newest.path if newest else None, metrics=dict(output.metrics),
                       ended_by="cancel" if cancelled else callback.ended_by or "steps",
                       processes=processes.world_size, main=processes.main)


def _barrier() -> None:
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.barrier()


def leave_process_group() -> None:
    """Leave the launch's process group (torchrun, accelerate) before the process exits: a process that exits
    holding it can abort on the connection its peer closes first (gloo). Nothing to do in one process."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


def advantage_scale(config: TrainConfig) -> str:
    """TRL's `scale_rewards` for a run: the config's, except that both orders turn "group" into "batch".

    The consistency reward pays a right verdict the share of right verdicts in the other order's group, one number
    per group: divided by its own group's spread it cancels (the run would be the plain outcome reward on both
    orders). Scaled over the step, a group's update keeps the weight of how often its other order is right, so an
    example the judge gets right in one order only is learned in the order it gets wrong. "none" and "batch" stay."""
    return "batch" if config.both_orders and config.scale_rewards == "group" else config.scale_rewards


def reward_function(name: str, config: TrainConfig) -> Any:
    """The reward a run pays under `name`: with `both_orders`, the outcome reward ("accuracy") is the consistency
    reward (right in both orders)."""
    return REWARDS["consistency" if config.both_orders and name == "accuracy" else name]


def twin_blocks(dataset: Any, *, seed: int) -> Any:
    """The rows as (example, other order) blocks in a seeded random order, each block's order-0 row first.

    Refused in one line: rows without the `twin_key` and `order` columns, or a key without exactly one row of each
    order (a snapshot written in one order, or edited by hand)."""
    import random

    from reflectrm.training.recipe import TWIN_FIELDS

    missing = [c for c in TWIN_FIELDS if c not in dataset.column_names]
    if missing:
        raise ConfigError(f"both_orders needs rows written in both orders (columns {', '.join(TWIN_FIELDS)}; missing "
                          f"{', '.join(missing)}): start the run from the Train tab with 'Both orders', or export the "
                          "snapshot with `reflectrm export training --both-orders`")
    blocks: dict[str, dict[int, int]] = {}
    for i, (key, side) in enumerate(zip(dataset["twin_key"], dataset["order"], strict=True)):
        sides = blocks.setdefault(str(key), {})
        if side not in (0, 1) or side in sides:
            raise ConfigError(f"row {i}: twin_key {str(key)[:12]}... has {'a second' if side in sides else 'a bad'} "
                              f"order {side!r}: each key needs one row of order 0 and one of order 1")
        sides[side] = i
    broken = next((k for k, sides in blocks.items() if len(sides) != 2), None)
    if broken is not None:
        raise ConfigError(f"twin_key {broken[:12]}... has one row: each key needs one row of order 0 and one of "
                          "order 1 (write the snapshot in both orders again)")
    keys = sorted(blocks)
    random.Random(seed).shuffle(keys)
    return dataset.select([blocks[k][side] for k in keys for side in (0, 1)])


@contextlib.contextmanager
def _torch_threads(config: TrainConfig) -> Iterator[None]:
    """torch's CPU thread count set to `config.threads` while training, then put back."""
    import torch

    if config.threads is None or resolve_device(config.device) != "cpu":
        yield
        return
    before = torch.get_num_threads()
    torch.set_num_threads(config.threads)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def export_final(trainer: Any, tokenizer: Any, where: Path, *, meta: Mapping[str, Any]) -> Path | None:
    """Save the trained model (a LoRA adapter merged into it) and tokenizer where `judge --model` loads them."""
    if not trainer.accelerator.is_main_process:
        return None
    model = trainer.accelerator.unwrap_model(trainer.model)
    if hasattr(model, "merge_and_unload"):  # a peft model
        model = model.merge_and_unload()
    # Written beside and renamed into place, so a kill mid-save never leaves a half-written final model.
    partial = where.with_name(where.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    model.save_pretrained(partial)
    tokenizer.save_pretrained(partial)
    (partial / "training_card.json").write_text(json.dumps(dict(meta), indent=2, default=str) + "\n", encoding="utf-8")
    if where.exists():  # a resumed run that trained further replaces its earlier final model
        shutil.rmtree(where)
    partial.rename(where)
    return where


def _recording(reward: Any, files: RunFiles, config: TrainConfig, *, record: bool) -> Any:
    """`reward`, also appending the first few completions of each call to the run's completions.jsonl (`record`: the
    first reward of the main process; every other process keeps its completions to itself)."""

    def recorded(completions: Any, label: Any = None, task: Any = None, **kwargs: Any) -> list[float]:
        values = reward(completions=completions, label=label, task=task,
                        min_analysis_chars=config.min_analysis_chars, **kwargs)
        state = kwargs.get("trainer_state")
        if record and config.completions_to_record:
            for i in range(min(config.completions_to_record, len(completions))):
                files.append(files.completions, {
                    "step": (state.global_step + 1) if state is not None else None, "reward_fn": reward.__name__,
                    "task": task[i] if task else None, "label": label[i] if label else None,
                    "reward": values[i], "text": completion_text(completions[i])})
        return values

    recorded.__name__ = reward.__name__  # TRL names the metric after the function: rewards/accuracy_reward/mean
    return recorded
