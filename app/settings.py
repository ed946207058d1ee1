"""The app's settings: the one sectioned `Settings` of `reflectrm_db.settings` (store, judge, generation, app).

    REFLECTRM_AUTH="ana:secret,ben:hunter2"      # optional login (app section)
    REFLECTRM_DATABASE_URL=sqlite:///reflectrm.db # store section
    REFLECTRM_MAX_NEW_TOKENS=192                  # judge section, stage 1 and 2 (a demo judge writes 40-170 tokens)
    REFLECTRM_RUNS_DIR=/data/runs                 # where the Train tab's runs live (app section)

Each also has its nested name (`REFLECTRM_APP__AUTH`, `REFLECTRM_JUDGE__N`, ...). Command-line options
(`reflectrm app --port ...`) override the environment. The app builds on the store, so it reads the
store's settings module rather than restating any field.
"""

from __future__ import annotations

from reflectrm_db.settings import Settings, load_settings, parse_auth, parse_proxies

AppSettings = Settings
"""The name the app's modules use for the one settings object."""

__all__ = ("AppSettings", "Settings", "load_settings", "parse_auth", "parse_proxies")
