"""ReflectRM: a generative reward model that judges response pairs and reflects on its own analyses.

    >>> from reflectrm import judge, PreferencePair
    >>> q = "Start with 15. Step 1: add 9. Step 2: subtract 6. Step 3: add 8. Step 4: subtract 5. What is the result?"
    >>> j = judge(PreferencePair.from_query(q, "It is 21.", "It is 11."))   # the bundled demo judge
    >>> j.verdict
"""

from reflectrm.backends import Backend, BackendConfig, EngineConfig, load_backend
from reflectrm.core import JudgeConfig, Judgment, PreferencePair
from reflectrm.errors import BackendError, ConfigError, InputError, ReflectRMError
from reflectrm.pipeline import judge, judge_both_orders, judge_many, rejudge

__version__ = "0.1.0"

__all__ = [
    "Backend",
    "BackendConfig",
    "BackendError",
    "ConfigError",
    "EngineConfig",
    "InputError",
    "JudgeConfig",
    "Judgment",
    "PreferencePair",
    "ReflectRMError",
    "judge",
    "judge_both_orders",
    "judge_many",
    "load_backend",
    "rejudge",
]
