"""The hostile-input table (issue 18): one row per way a user can break a run.

Each row edits a good setup (config.yaml + t.jsonl in a tmp folder, and out/ holding a good earlier
greedy plan) and names the command, the exit code and a piece of the one-line message expected.
tests/test_hostile.py runs every row the same way: no traceback, exit 1 leaves out/ byte-identical,
exit 0/2 leave a set that verifies. A new input kind is a new row here.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import yaml

BIG = 2 ** 63
PROMPTS, GENS = [40, 100, 130, 60, 250, 200], [10, 12, 30, 10, 5, 30]


@dataclass
class Case:
    """`edit(folder)` breaks the setup and returns extra command arguments (or a full argv with `argv=True`)."""

    id: str
    edit: Callable[[Path], list | None]
    code: int = 1
    needle: str = ""
    command: str = "solve"
    check: Callable[[Path], None] | None = None
    tags: list = field(default_factory=list)


# --- edits ----------------------------------------------------------------------------------------

def set_key(dotted: str, value):
    def edit(folder: Path):
        conf = yaml.safe_load((folder / "config.yaml").read_text())
        node = conf
        parts = dotted.split(".")
        for part in parts[:-1]:
            node = node[int(part)] if isinstance(node, list) else node.setdefault(part, {})
        node[parts[-1]] = value
        (folder / "config.yaml").write_text(yaml.safe_dump(conf))
    return edit


def config_text(change: Callable[[str], str]):
    def edit(folder: Path):
        path = folder / "config.yaml"
        path.write_text(change(path.read_text()))
    return edit


def yaml_value(dotted: str, raw: str):
    """Set a key to a raw YAML scalar (.nan, .inf, true) that safe_dump would write differently."""
    def edit(folder: Path):
        set_key(dotted, "@@RAW@@")(folder)
        path = folder / "config.yaml"
        path.write_text(path.read_text().replace("'@@RAW@@'", raw))
    return edit


def trace_text(text: str | bytes, name="t.jsonl"):
    def edit(folder: Path):
        data = text.encode() if isinstance(text, str) else text
        (folder / name).write_bytes(data)
        if name != "t.jsonl":
            set_key("buckets.0.requests", name)(folder)
    return edit


def trace_path(target: str):
    def edit(folder: Path):
        set_key("buckets.0.requests", target)(folder)
    return edit


def rows(extra: list[str]) -> str:
    good = [json.dumps({"request_id": f"r-{i}", "prompt_len": p, "gen_len": g})
            for i, (p, g) in enumerate(zip(PROMPTS, GENS))]
    return "\n".join(good + extra) + "\n"


def args(*extra: str):
    return lambda folder: list(extra)


def out_dir(value: str):
    return lambda folder: ["--out", value]


def plan_lines(change: Callable[[list[dict]], list]):
    """Rewrite the seeded greedy plan file (for verify.py and export.py rows)."""
    def edit(folder: Path):
        path = folder / "out" / "greedy" / "t.plan.jsonl"
        objs = [json.loads(line) for line in path.read_text().splitlines()]
        out = change(objs)
        path.write_bytes(out if isinstance(out, bytes) else ("\n".join(
            o if isinstance(o, str) else json.dumps(o) for o in out) + "\n").encode())
    return edit


def first(change: Callable[[dict], None]):
    def apply(objs):
        change(objs[0])
        return objs
    return apply


def symlink_loop(name: str):
    def edit(folder: Path):
        (folder / name).symlink_to(folder / name)
    return edit


def both(*edits):
    def edit(folder: Path):
        extra = []
        for e in edits:
            extra += e(folder) or []
        return extra
    return edit


def user_file(folder: Path):
    (folder / "out" / "greedy" / "notes.txt").write_text("mine\n")
    (folder / "out" / "mine.txt").write_text("mine too\n")


def user_files_kept(folder: Path):
    assert (folder / "out" / "greedy" / "notes.txt").read_text() == "mine\n"
    assert (folder / "out" / "mine.txt").read_text() == "mine too\n"


def trace_inside_out(folder: Path):
    (folder / "out" / "greedy" / "t.jsonl").write_text((folder / "t.jsonl").read_text())
    set_key("buckets.0.requests", "out/greedy/t.jsonl")(folder)


def fifo(folder: Path):
    os.mkfifo(folder / "fifo.jsonl")
    set_key("buckets.0.requests", "fifo.jsonl")(folder)


def unowned_plan(folder: Path):
    (folder / "out" / "cpsat").mkdir()
    (folder / "out" / "cpsat" / "t.plan.jsonl").write_text("someone else's\n")
    return ["--method", "cpsat"]


def user_out_file(rel: str):
    """A file of the user's where a command would write (exit 1, never touched)."""
    def edit(folder: Path):
        (folder / "out" / rel).parent.mkdir(parents=True, exist_ok=True)
        (folder / "out" / rel).write_text("mine\n")
    return edit


def user_out_file_kept(rel: str):
    def check(folder: Path):
        assert (folder / "out" / rel).read_text() == "mine\n"
    return check


def analyze_wrote(folder: Path):
    manifest = json.loads((folder / "out" / ".shapeplan-manifest.json").read_text())
    assert "t.hist.png" in manifest["files"] and (folder / "out" / "t.hist.png").stat().st_size > 1000
    assert (folder / "out" / "report.json").exists()              # the solve's set beside it is kept


GOOD_PROFILE = ("phase,seq_len,ms\n" + "".join(f"prefill,{x},{1 + x / 100}\n" for x in (64, 128, 256, 512)) +
                "batch_overhead,0,2\n")


def profile(text: str):
    def edit(folder: Path):
        (folder / "p.csv").write_text(text)
    return edit


# --- the table --------------------------------------------------------------------------------

CASES = [
    # data loss: a run touches only what it wrote, never an input
    Case("user-files-kept", lambda f: user_file(f), code=0, check=user_files_kept),
    Case("unowned-plan-refused", unowned_plan, needle="was not written by shapeplan"),
    Case("trace-under-out", trace_inside_out, needle="output dir contains the input"),
    Case("config-under-out", out_dir("."), needle="output dir contains the input"),
    Case("out-root", out_dir("/"), needle="root of the file system"),
    Case("out-is-file", out_dir("t.jsonl"), needle="is not a folder"),
    Case("out-dev-null", out_dir("/dev/null"), needle="is not a folder"),
    Case("out-unwritable", out_dir("/proc/shapeplan-hostile"), needle="cannot"),
    Case("out-symlink-loop", both(symlink_loop("loop"), out_dir("loop")), needle="loop"),
    # numbers out of range or of the wrong kind in the config
    Case("max-unique-huge", set_key("shapes.max_unique", BIG), needle="max_unique"),
    Case("max-batch-size-huge", set_key("batching.max_batch_size", 2 ** 64), needle="max_batch_size"),
    Case("seed-huge", set_key("solver.seed", BIG), needle="seed"),
    Case("granularity-huge", set_key("shapes.granularity", BIG), needle="granularity"),
    Case("cost-inf", yaml_value("cost_model.prefill_cost", "[0, .inf, 1]"), needle="prefill_cost"),
    Case("cost-nan", yaml_value("cost_model.batch_overhead_cost", ".nan"), needle="batch_overhead_cost"),
    Case("cost-huge-float", set_key("cost_model.decode_step_ms", [0, 1e300, 0]), needle="decode_step_ms"),
    Case("weight-nan", yaml_value("objective.weights", "{cost: .nan}"), needle="weights"),
    Case("weight-inf", yaml_value("objective.weights", "{cost: 1, pad_tokens: .inf}"), needle="weights"),
    Case("max-unique-bool", yaml_value("shapes.max_unique", "true"), needle="boolean"),
    Case("limit-bool", yaml_value("buckets.0.limits.p95_latency_ms", "true"), needle="boolean"),
    Case("limit-nan", yaml_value("buckets.0.limits.pad_ratio", ".nan"), needle="pad_ratio"),
    Case("limit-inf", yaml_value("buckets.0.limits.cost", ".inf"), needle="cost"),
    Case("time-limit-key-inf", yaml_value("solver.time_limit_s", ".inf"), needle="time_limit_s"),
    Case("candidates-bool", yaml_value("shapes.candidates", "[64, true]"), needle="boolean"),
    Case("duplicate-yaml-key", config_text(lambda t: t + "shapes:\n  max_unique: 3\n"), needle="duplicate key 'shapes'"),
    Case("duplicate-nested-key", config_text(lambda t: t.replace("solver:\n", "solver:\n  workers: 1\n", 1)),
         needle="duplicate key 'workers'"),
    Case("config-bytes", lambda f: (f / "config.yaml").write_bytes(b"name: \xff\xfe\n"), needle="not UTF-8"),
    Case("config-dev-zero", lambda f: ["/dev/zero"], needle="not a regular file", tags=["argv"]),
    Case("config-deep", config_text(lambda t: t + "x: " + "[" * 5000 + "]" * 5000 + "\n"), needle="config"),
    # traces
    Case("prompt-huge", trace_text(rows(['{"request_id": "x", "prompt_len": 9223372036854775808, "gen_len": 1}'])),
         needle="out of range"),
    Case("gen-huge-neg", trace_text(rows(['{"request_id": "x", "prompt_len": 5, "gen_len": -9223372036854775809}'])),
         needle="gen_len"),
    Case("csv-huge", trace_text("prompt_len,gen_len\n5,3\n99999999999999999999,2\n", "t.csv"), needle="out of range"),
    Case("csv-duplicate-header", trace_text("prompt_len,gen_len,gen_len\n5,3,3\n", "t.csv"),
         needle="duplicate column name 'gen_len'"),
    Case("jsonl-array-line", trace_text(rows(["[1, 2, 3]"])), needle="must be a JSON object"),
    Case("jsonl-scalar-line", trace_text(rows(["42"])), needle="t.jsonl:7"),
    Case("jsonl-string-line", trace_text(rows(['"r-9"'])), needle="t.jsonl:7"),
    Case("jsonl-bool-len", trace_text(rows(['{"request_id": "x", "prompt_len": true, "gen_len": 1}'])),
         needle="prompt_len"),
    Case("jsonl-float-len", trace_text(rows(['{"request_id": "x", "prompt_len": 5.5, "gen_len": 1}'])),
         needle="prompt_len"),
    Case("jsonl-nan-len", trace_text(rows(['{"request_id": "x", "prompt_len": NaN, "gen_len": 1}'])),
         needle="prompt_len"),
    Case("jsonl-id-number", trace_text(rows(['{"request_id": 7, "prompt_len": 5, "gen_len": 1}'])),
         needle="request_id"),
    Case("trace-not-utf8", trace_text(rows([]).encode() + b'{"request_id": "\xff", "prompt_len": 5, "gen_len": 1}\n'),
         needle="not UTF-8"),
    Case("trace-dev-zero", trace_path("/dev/zero"), needle="not a regular file"),
    Case("trace-fifo", fifo, needle="not a regular file"),
    Case("trace-folder", trace_path("."), needle="t"),
    Case("trace-symlink-loop", both(symlink_loop("loop.jsonl"), trace_path("loop.jsonl")), needle="loop.jsonl"),
    # command-line usage
    Case("no-args", lambda f: [], needle="required", tags=["argv"]),
    Case("unknown-flag", args("--bogus"), needle="unrecognized arguments"),
    Case("method-nonsense", args("--method", "nonsense"), needle="invalid choice"),
    Case("time-limit-abc", args("--time-limit", "abc"), needle="--time-limit"),
    Case("time-limit-nan", args("--time-limit", "nan"), needle="--time-limit"),
    Case("time-limit-inf", args("--time-limit", "inf"), needle="--time-limit"),
    Case("time-limit-zero", args("--time-limit", "0"), needle="--time-limit"),
    Case("time-limit-negative", args("--time-limit=-3"), needle="--time-limit"),
    Case("export-nonsense", args("--export", "nonsense"), needle="nonsense"),
    # work bounded by the time limit whatever the values
    Case("prompt-1e12", trace_text(rows(['{"request_id": "x", "prompt_len": 1000000000000, "gen_len": 1}'])),
         code=-1, tags=["method-all"]),
    Case("gen-1e12", trace_text(rows(['{"request_id": "x", "prompt_len": 5, "gen_len": 1000000000000}'])),
         code=-1, tags=["method-all"]),
    Case("max-unique-absurd", set_key("shapes.max_unique", 2 ** 62), needle="max_unique"),
    Case("max-batch-absurd", set_key("batching.max_batch_size", 2 ** 62), needle="max_batch_size"),
    Case("time-limit-absurd", set_key("solver.time_limit_s", 1e20), needle="time_limit_s"),
    Case("max-unique-largest", set_key("shapes.max_unique", 10_000), code=-1, tags=["cpsat"]),
    Case("max-batch-largest", set_key("batching.max_batch_size", 1_000_000), code=-1, tags=["cpsat"]),
    Case("batch-tokens-largest", set_key("batching.max_batch_tokens", 2 ** 50), code=-1, tags=["cpsat"]),
    Case("granularity-largest", set_key("shapes.granularity", 2 ** 40), code=-1, tags=["method-all"]),
    Case("prompt-int64-max", trace_text(rows(['{"request_id": "x", "prompt_len": 9223372036854775807, "gen_len": 1}'])),
         needle="out of range"),
    Case("prompt-largest", trace_text(rows(['{"request_id": "x", "prompt_len": 1099511627776, "gen_len": 1099511627776}'])),
         code=-1, tags=["method-all"]),
    # plan files given to verify.py
    Case("plan-unknown-field", plan_lines(first(lambda o: o.update(extra=1))), command="verify",
         needle="unknown field 'extra'"),
    Case("plan-unknown-shape-field", plan_lines(first(lambda o: o["shape"].update(depth=2))), command="verify",
         needle="unknown field shape.depth"),
    Case("plan-batch-null", plan_lines(first(lambda o: o.update(batch_id=None))), command="verify",
         needle="batch_id=None"),
    Case("plan-batch-int", plan_lines(first(lambda o: o.update(batch_id=7))), command="verify", needle="batch_id=7"),
    Case("plan-request-list", plan_lines(first(lambda o: o.update(request_id=["r-0"]))), command="verify",
         needle="request_id"),
    Case("plan-seq-huge", plan_lines(first(lambda o: o["shape"].update(seq_align=2 ** 70))), command="verify",
         needle="seq_align"),
    Case("plan-seq-float", plan_lines(first(lambda o: o["shape"].update(seq_align=256.0))), command="verify",
         needle="seq_align"),
    Case("plan-seq-bool", plan_lines(first(lambda o: o["shape"].update(seq_align=True))), command="verify",
         needle="seq_align"),
    Case("plan-array-line", plan_lines(lambda objs: objs + ["[1, 2]"]), command="verify", needle="JSON object"),
    Case("plan-not-utf8", plan_lines(lambda objs: b'{"request_id": "\xff"}\n'), command="verify", needle="not UTF-8"),
    Case("plan-missing-shape", plan_lines(first(lambda o: o.pop("shape"))), command="verify", needle="shape"),
    Case("plan-dir-missing", lambda f: None, command="verify-missing", needle="no such plan folder"),
    Case("export-seq-huge", plan_lines(first(lambda o: o["shape"].update(seq_align=2 ** 70))), command="export",
         needle="seq_align"),
    Case("export-not-utf8", plan_lines(lambda objs: b"\xfe\xff\n"), command="export", needle="not UTF-8"),
    Case("export-unknown-field", plan_lines(first(lambda o: o.update(extra=1))), command="export",
         needle="unknown field"),
    Case("export-bad-report", lambda f: (f / "out" / "report.json").write_text("[1]"), command="export",
         needle="report.json"),
    # the engine: section, checked like every config number
    Case("engine-block-size-bool", yaml_value("engine", "{name: vllm-gaudi, block_size: true}"),
         needle="engine.block_size: block_size=True must be a number, not a boolean"),
    Case("engine-block-size-huge", set_key("engine", {"name": "vllm-gaudi", "block_size": BIG}),
         needle="engine.block_size: block_size=9223372036854775808 is out of range"),
    Case("engine-block-size-nan", yaml_value("engine", "{name: vllm-gaudi, block_size: .nan}"),
         needle="engine.block_size: block_size=nan must be a finite number"),
    Case("engine-block-size-float", set_key("engine", {"name": "vllm-gaudi", "block_size": 64.5}),
         needle="block_size=64.5 must be a whole number"),
    Case("engine-block-size-absurd", set_key("engine", {"name": "vllm-gaudi", "block_size": 2 ** 62}),
         needle="engine.block_size"),
    Case("engine-tokens-huge", set_key("engine", {"name": "vllm-gaudi", "max_num_batched_tokens": 2 ** 64}),
         needle="engine.max_num_batched_tokens"),
    Case("engine-add-bos-number", set_key("engine", {"name": "jetstream", "add_bos": 1}),
         needle="engine.add_bos: add_bos=1 must be true or false"),
    Case("engine-unknown-key", set_key("engine", {"name": "neuron", "blok_size": 16}),
         needle="engine.blok_size: unknown key 'blok_size'"),
    Case("engine-not-a-mapping", set_key("engine", 7), needle="engine=7 must be an engine name"),
    # analyze.py, sweep.py and calibrate.py write like solve.py: only their own files, into a safe folder
    Case("analyze-user-files-kept", user_out_file("mine.txt"), code=0, command="analyze",
         check=lambda f: (user_out_file_kept("mine.txt")(f), analyze_wrote(f))),
    Case("analyze-unowned-file", user_out_file("t.hist.png"), command="analyze", needle="was not written by shapeplan"),
    Case("analyze-out-root", out_dir("/"), command="analyze", needle="root of the file system"),
    Case("analyze-out-is-file", out_dir("t.jsonl"), command="analyze", needle="is not a folder"),
    Case("analyze-out-holds-config", out_dir("."), command="analyze", needle="output dir contains the input"),
    Case("analyze-out-symlink-loop", both(symlink_loop("loop"), out_dir("loop")), command="analyze", needle="loop"),
    Case("sweep-unowned-csv", user_out_file("sweep.csv"), command="sweep", needle="was not written by shapeplan"),
    Case("sweep-out-root", out_dir("/"), command="sweep", needle="root of the file system"),
    Case("sweep-out-is-file", out_dir("t.jsonl"), command="sweep", needle="is not a folder"),
    Case("sweep-out-holds-trace", out_dir("."), command="sweep", needle="output dir contains the input"),
    Case("sweep-user-files-kept", user_out_file("greedy/notes.txt"), code=0, command="sweep",
         check=user_out_file_kept("greedy/notes.txt")),
    Case("calibrate-unowned-yaml", user_out_file("cost_model.yaml"), command="calibrate",
         needle="was not written by shapeplan"),
    Case("calibrate-out-root", out_dir("/"), command="calibrate", needle="root of the file system"),
    Case("calibrate-out-holds-profile", out_dir("."), command="calibrate", needle="output dir contains the input"),
    Case("calibrate-out-is-file", out_dir("p.csv"), command="calibrate", needle="is not a folder"),
    Case("calibrate-profile-dev-zero", lambda f: ["/dev/zero"], command="calibrate", needle="not a regular file"),
    Case("calibrate-value-inf", profile(GOOD_PROFILE + "prefill,1024,inf\n"), command="calibrate",
         needle="p.csv:7: ms='inf' must be a finite number"),
    Case("calibrate-value-huge", profile(GOOD_PROFILE + "prefill,1e300,1\n"), command="calibrate",
         needle="p.csv:7: seq_len='1e+300' must be a finite number between 0 and 1e+15"),
    Case("calibrate-user-files-kept", user_out_file("mine.txt"), code=0, command="calibrate",
         check=user_out_file_kept("mine.txt")),
    Case("export-unowned-file", user_out_file("greedy/export/shapes.json"), command="export",
         needle="was not written by shapeplan"),
    Case("export-out-root", out_dir("/"), command="export", needle="root of the file system"),
    Case("export-out-holds-plan", out_dir("out/greedy"), command="export", needle="output dir contains the input"),
    Case("export-out-holds-trace", out_dir("."), command="export", needle="output dir contains the input"),
    Case("export-user-files-kept", user_out_file("greedy/export/notes.txt"), code=0, command="export",
         check=user_out_file_kept("greedy/export/notes.txt")),
]
