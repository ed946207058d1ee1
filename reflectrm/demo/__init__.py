"""The demo judge: a tiny Qwen3-architecture model the project builds and ships as the embedded default.

It judges a synthetic, verifiable domain (arithmetic answers), so every judgment can be checked
exactly. Rebuild it with `python -m reflectrm.demo.build`.
"""

from pathlib import Path

DEMO_MODEL_DIR = Path(__file__).resolve().parent / "model"
