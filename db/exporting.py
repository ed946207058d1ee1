"""Export stored records as JSONL, Parquet, or a Hugging Face `datasets` dataset on disk.

Kinds: `pairs`, `judgments`, `corrections`, `preference-examples`, `reflection-pairs`, and
`training`: the active examples (or a snapshot's) as rows TRL's GRPOTrainer reads without
conversion: `prompt` (a list of {role, content} messages, TRL's conversational format), `label` (the
better candidate, 1 or 2) and `task` ("response" or "analysis") for the reward function
(`reflectrm.training.rewards`), plus `origin`, `pair_id` and `example_id` for provenance. They are
the recipe's rows (`reflectrm.training.recipe`, through `reflectrm_db.training_rows`): the rows of
`reflectrm.training.data` are built by the same code, and `read_examples` reads these.
The `hf` format writes `training` rows (for the two example kinds: just that kind's rows).

JSONL rows hold what Parquet rows hold; a judgment's JSONL row is `Judgment.to_dict()` plus row ids
(`Judgment.from_dict` reads it back), and its Parquet row nests the same fields, with `config` and
`timings` as JSON strings. Text is written as stored: NUL bytes and every Unicode plane survive all
three formats. A lone surrogate (not Unicode, but a Python string can hold one) survives JSONL as a
`\\udXXX` escape; Parquet and `hf` refuse it.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterable, Iterator
from itertools import chain, islice
from pathlib import Path
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from reflectrm_db import models as m
from reflectrm_db.curation import get_corrections
from reflectrm_db.repository import get_judgments, iter_judgments, pair_from_row
from reflectrm_db.training_rows import example_rows, training_rows
from reflectrm_db.types import dumps_json
from reflectrm.core.contest import contest_reason
from reflectrm.core.types import messages_to_dicts
from reflectrm.errors import InputError, require

_BATCH = 1000  # rows per database read and per Parquet row group


def export_rows(
    session: Session, *, kind: str, fmt: str, states: tuple[str, ...], snapshot_id: int | None,
    both_orders: bool = False
) -> Iterator[dict[str, Any]]:
    """The rows of one export, in id order (`both_orders`: training rows, each followed by its other order)."""
    if fmt == "hf" or kind == "training":
        wanted = {"preference-examples": ("preference",), "reflection-pairs": ("reflection",)}.get(
            kind, ("preference", "reflection")
        )
        for example_kind in wanted:
            yield from training_rows(session, kind=example_kind, states=states, snapshot_id=snapshot_id,
                                     both_orders=both_orders)
        return
    if kind == "pairs":
        yield from _pair_rows(session)
    elif kind == "judgments":
        yield from (_judgment_row(s, nested_json=fmt == "parquet") for s in iter_judgments(session))
    elif kind == "corrections":
        yield from _correction_rows(session)
    else:
        example_kind = "preference" if kind == "preference-examples" else "reflection"
        rows = example_rows(session, kind=example_kind, states=states, snapshot_id=snapshot_id)
        while chunk := list(islice(rows, _BATCH)):
            contested = _contest_reasons(session, {row.correction_id for row, *_ in chunk} - {None})
            for row, pair, critiques, _ in chunk:
                contest = contested.get(row.correction_id, "")
                yield {**_example_row(example_kind, row, pair, critiques), "contested": contest}


# --- row builders ----------------------------------------------------------------------------------


def _pair_fields(pair: Any) -> dict[str, Any]:
    return {
        "id": pair.id,
        "messages": messages_to_dicts(pair.conversation),
        "response_1": pair.response_1,
        "response_2": pair.response_2,
        "label": pair.label,
        "source": pair.source,
        "subset": pair.subset,
    }


def _pair_rows(session: Session) -> Iterator[dict[str, Any]]:
    last = 0
    while rows := list(
        session.execute(select(m.Pair.__table__).where(m.Pair.id > last).order_by(m.Pair.id).limit(_BATCH))
    ):
        for row in rows:
            yield {
                "pair_id": row.id,
                **_pair_fields(pair := pair_from_row(row)),
                "tie": pair.tie,  # a tie has no label: without it a round trip reads the pair as unlabelled
                "fingerprint": row.fingerprint,
                "created_at": row.created_at,
            }
        last = rows[-1].id


def _judgment_row(stored: Any, *, nested_json: bool) -> dict[str, Any]:
    d = stored.judgment.to_dict()
    if nested_json:  # Parquet: numbers stay numbers; free-form mappings become JSON strings
        d["rollouts"] = [{**r, "confidence": float(r["confidence"])} for r in d["rollouts"]]
        d["config"], d["timings"] = dumps_json(d["config"]), dumps_json(d["timings"])
    return {
        "judgment_id": stored.id,
        "pair_id": stored.pair_id,
        "twin_id": stored.twin_id,
        "swapped": stored.swapped,
        "created_at": stored.created_at,
        **d,
    }


def _correction_rows(session: Session) -> Iterator[dict[str, Any]]:
    corrections = get_corrections(session)
    judged = sorted({c.judgment_id for c in corrections})
    judgments = {s.id: s.judgment for s in get_judgments(session, judgment_ids=judged)}
    for c in corrections:
        yield {
            "correction_id": c.id,
            "judgment_id": c.judgment_id,
            "author": c.author,
            "verdict": c.verdict,
            "note": c.note,
            "marks": [{"position": p, "mark": mk} for p, mk in sorted(c.marks.items())],
            "state": "active" if c.active else "withdrawn",
            "revision": c.revision,
            "derivation_seed": c.derivation_seed,
            "max_pairs": c.max_pairs,
            "created_at": c.created_at,
            "updated_at": c.updated_at,
            "withdrawn_at": c.withdrawn_at,
            "preference_example_ids": list(c.preference_example_ids),
            "reflection_pair_ids": list(c.reflection_pair_ids),
            # why the verdict was contested when it was saved anyway ("" when it was not): a curator filters on it
            "contested": contest_reason(judgments[c.judgment_id], c.verdict),
        }


def _contest_reasons(session: Session, correction_ids: set[int]) -> dict[int, str]:
    """Correction id -> why its verdict was contested when saved anyway ("" when it was not), as in the corrections
    export: an example derived from a contested correction says so, in a snapshot's export too."""
    if not correction_ids:
        return {}
    columns = select(m.Correction.id, m.Correction.judgment_id, m.Correction.verdict)
    verdicts = session.execute(columns.where(m.Correction.id.in_(correction_ids))).all()
    judgments = {s.id: s.judgment for s in get_judgments(session, judgment_ids=sorted({j for _, j, _ in verdicts}))}
    return {cid: contest_reason(judgments[jid], verdict) for cid, jid, verdict in verdicts}


def _example_row(kind: str, row: Any, pair: Any, critiques: tuple[Any, Any] | None) -> dict[str, Any]:
    out = {"example_id": row.id, "pair_id": row.pair_id, **_pair_fields(pair)}
    if critiques is not None:
        out.update(
            {
                "critique_1": critiques[0].analysis,
                "critique_2": critiques[1].analysis,
                "prediction_1": critiques[0].prediction,
                "prediction_2": critiques[1].prediction,
                "critique_1_sample_id": critiques[0].id,
                "critique_2_sample_id": critiques[1].id,
            }
        )
    out.update(
        {
            "label": row.label,
            "state": row.state,
            "correction_id": row.correction_id,
            "judgment_id": row.judgment_id,
            "content_hash": row.content_hash,
            "created_at": row.created_at,
        }
    )
    return out


# --- Arrow schemas (explicit: a column that is null in the first rows must not lose its type) -----


def arrow_schema(kind: str, fmt: str, *, both_orders: bool = False) -> Any:
    """The Arrow schema of an export's rows (`both_orders`: training rows with `twin_key` and `order`)."""
    pa = require("pyarrow", extra="store")
    text, num, flag, real, ts = pa.string(), pa.int64(), pa.bool_(), pa.float64(), pa.timestamp("us", tz="UTC")

    def struct(**fields: Any) -> Any:
        return pa.struct(list(fields.items()))

    messages = pa.list_(struct(role=text, content=text))
    if fmt == "hf" or kind == "training":
        twins = dict(twin_key=text, order=num) if both_orders else {}
        return pa.schema(dict(prompt=messages, label=num, task=text, origin=text, pair_id=text, example_id=num,
                              **twins).items())
    # fmt: off
    pair = dict(id=text, messages=messages, response_1=text, response_2=text, label=num, source=text, subset=text,
                tie=flag)
    example = dict(example_id=num, pair_id=num, **{k: v for k, v in pair.items() if k not in ("label", "tie")})
    provenance = dict(label=num, state=text, correction_id=num, judgment_id=num, content_hash=text, created_at=ts,
                      contested=text)
    rollout = struct(index=num, text=text, analysis=text, prediction=num, status=text, confidence=real,
                     num_tokens=num, greedy=flag, finish_reason=text)
    reflection = struct(sample=num, anchor=num, order=pa.list_(num), text=text, analysis=text, choice=num,
                        status=text, num_tokens=num, prefers_sample=flag)
    columns = {
        "pairs": dict(pair_id=num, **pair, fingerprint=text, created_at=ts),
        "judgments": dict(
            judgment_id=num, pair_id=num, twin_id=num, swapped=flag, created_at=ts, pair=struct(**pair),
            strategy=text, rollouts=pa.list_(rollout), verdict=num, anchor=num, reflections=pa.list_(reflection),
            winners=pa.list_(num), vote=struct(counts=pa.list_(real), voters=pa.list_(num), anchor_added=flag),
            stage2_skipped=flag, abstain_reason=text, config=text, model=text, model_revision=text, backend=text,
            seed=num, timings=text, tokens_generated=num, correct=flag),
        "corrections": dict(
            correction_id=num, judgment_id=num, author=text, verdict=num, note=text,
            marks=pa.list_(struct(position=num, mark=text)), state=text, revision=num, derivation_seed=num,
            max_pairs=num, created_at=ts, updated_at=ts, withdrawn_at=ts, preference_example_ids=pa.list_(num),
            reflection_pair_ids=pa.list_(num), contested=text),
        "preference-examples": dict(**example, **provenance),
        "reflection-pairs": dict(
            **example, critique_1=text, critique_2=text, prediction_1=num, prediction_2=num,
            critique_1_sample_id=num, critique_2_sample_id=num, **provenance),
    }
    # fmt: on
    return pa.schema(list(columns[kind].items()))


# --- writers ---------------------------------------------------------------------------------------


def write_rows(rows: Iterable[dict[str, Any]], *, fmt: str, out: Path, schema: Any = None,
               nothing: str = "there is nothing to export") -> int:
    """Write rows to `out` in `fmt` (`schema`: their Arrow schema, for parquet and hf); returns the row count.

    A failed export leaves no partial file behind, and neither does one without rows: an empty file read
    as "exported" (a training folder with no example, say) hides the mistake behind it.

    Raises:
        InputError: `out` exists or its folder does not; or there were no rows (`nothing` says why).
    """
    out = Path(out)
    if out.exists():
        raise InputError(f"{out} already exists: pass a new --out path (exports never overwrite)")
    if not out.parent.is_dir():
        raise InputError(f"the folder of {out} does not exist: create it first")
    rows = iter(rows)
    first = next(rows, None)
    if first is None:  # refused before anything is written: no empty file (or folder) to read as an export
        raise InputError(f"{nothing}: nothing was written to {out}")
    rows = chain([first], rows)
    tmp = out.with_name(f".{out.name}.partial")
    try:
        if fmt == "jsonl":
            count = _write_jsonl(rows, tmp)
        else:
            count = (_write_parquet if fmt == "parquet" else _write_hf)(rows, tmp, schema)
        tmp.rename(out)
    finally:
        if tmp.is_dir():
            shutil.rmtree(tmp)
        elif tmp.exists():
            tmp.unlink()
    return count


def _json_default(value: Any) -> Any:
    if hasattr(value, "isoformat"):
        return value.isoformat()
    raise TypeError(f"cannot export {type(value).__name__}")


# Characters `str.splitlines()` (and JavaScript) treat as line ends that JSON leaves unescaped.
_LINE_BREAKS = str.maketrans({"\u2028": "\\u2028", "\u2029": "\\u2029", "\x85": "\\u0085"})


def jsonl_line(row: dict[str, Any]) -> str:
    """One JSON line: UTF-8 text as is, except what could split the line or cannot be encoded."""
    line = json.dumps(row, ensure_ascii=False, default=_json_default)
    try:
        line.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate: escaped JSON keeps it
        return json.dumps(row, default=_json_default)
    return line.translate(_LINE_BREAKS)  # they only occur inside JSON strings, where the escape is valid


def _write_jsonl(rows: Iterable[dict[str, Any]], path: Path) -> int:
    count = 0
    with path.open("w", encoding="utf-8", newline="\n") as fh:
        for row in rows:
            fh.write(jsonl_line(row) + "\n")
            count += 1
    return count


def _batches(rows: Iterable[dict[str, Any]]) -> Iterator[list[dict[str, Any]]]:
    batch: list[dict[str, Any]] = []
    for row in rows:
        batch.append(row)
        if len(batch) == _BATCH:
            yield batch
            batch = []
    if batch:
        yield batch


def _arrow_table(batch: list[dict[str, Any]], schema: Any) -> Any:
    pa = require("pyarrow", extra="store")
    try:
        return pa.Table.from_pylist(batch, schema=schema)
    except UnicodeEncodeError as exc:
        raise InputError(
            "a record holds a lone surrogate (text that is not valid Unicode), which Parquet cannot store: "
            "export it as jsonl"
        ) from exc


def _write_parquet(rows: Iterable[dict[str, Any]], path: Path, schema: Any) -> int:
    pq = require("pyarrow.parquet", extra="store")
    count = 0
    with pq.ParquetWriter(path, schema) as writer:  # no rows: still a valid file with the columns
        for batch in _batches(rows):
            writer.write_table(_arrow_table(batch, schema))
            count += len(batch)
    return count


def _write_hf(rows: Iterable[dict[str, Any]], path: Path, schema: Any) -> int:
    require("datasets", extra="train")
    pa = require("pyarrow", extra="store")
    from datasets import Dataset
    from datasets.table import InMemoryTable

    table = pa.Table.from_batches(
        [b for batch in _batches(rows) for b in _arrow_table(batch, schema).to_batches()], schema=schema
    )
    Dataset(InMemoryTable(table)).save_to_disk(str(path))
    return table.num_rows
