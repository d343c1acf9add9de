"""One meaning per flag name: every command's --help against docs/commands.md, "Flags shared by several commands".

The commands come from `memplan --help`; each one's option names from its `--help`. The test fails when a
command lacks a flag the table says it takes, when a command lists a flag that the table gives to other commands
only (the same name for another thing), when a name several commands list is missing from the table, and when a
command's help text for a shared flag leaves out the table's words (in order; punctuation aside). The old names
(`--plan` on analyze/plan, `--profile` on fit/trace, `--gpus` on fit, `--dp-*` on train) must stay hidden from
--help, still work, and warn once on stderr. Exit 77 when the command is missing.
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile

FAILS = []
COLUMN = 30  # CLI11's help column: a description starts here, or on the next line when the option's spec is longer


def check(cond, what):
    if not cond:
        FAILS.append(what)
        print("FAIL: " + what)


def run(memplan, *args):
    return subprocess.run([memplan, *args], capture_output=True, text=True)


def commands(memplan):
    out = run(memplan, "--help").stdout
    names, inside = [], False
    for line in out.splitlines():
        if line.startswith("Subcommands:"):
            inside = True
        elif inside and line.startswith("  ") and line.strip():
            names.append(line.split()[0])
        elif inside and line.strip() and not line.startswith(" "):
            inside = False
    return names


def help_options(memplan, cmd):
    """{option name: its help text} from `memplan CMD --help` (-h/--help left out)."""
    r = run(memplan, cmd, "--help")
    check(r.returncode == 0, f"`{cmd} --help` exited {r.returncode}")
    lines = r.stdout.splitlines()
    opts = {}
    for i, line in enumerate(lines):
        if not re.match(r"  -", line):
            continue
        spec = line.split()[0]
        if len(line) > COLUMN and line[COLUMN - 1] == " " and line[COLUMN] != " ":
            text = line[COLUMN:]
        else:  # the spec filled the column: the text is on the next line
            text = lines[i + 1].strip() if i + 1 < len(lines) and lines[i + 1].startswith(" " * COLUMN) else ""
        for name in spec.split(","):
            if name not in ("-h", "--help"):
                opts[name] = text
    return opts


def cells(line):
    return [c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1]]


def shared_table(path):
    """[(names, meaning, commands)] of the table under the heading "Flags shared by several commands"."""
    rows, inside = [], False
    with open(path) as f:
        for line in f:
            if line.startswith("## "):
                inside = line.strip() == "## Flags shared by several commands"
                continue
            if not inside or not line.startswith("|"):
                continue
            c = cells(line)
            if len(c) != 3 or set(c[0]) <= set("-") or c[0] == "flag":
                continue
            names = re.findall(r"`([^`]+)`", c[0])
            cmds = re.findall(r"`([^`]+)`", c[2])
            rows.append((names, c[1].replace("\\|", "|"), cmds))
    return rows


def words(text):
    return re.findall(r"[a-z0-9_]+", text.lower())


def says(text, meaning):
    """The meaning's words appear in the help text in order."""
    it = iter(words(text))
    return all(w in it for w in words(meaning))


def check_table(memplan, doc):
    rows = shared_table(doc)
    check(len(rows) >= 10, f"{doc}: no table under \"Flags shared by several commands\" ({len(rows)} rows)")
    cmds = commands(memplan)
    check(len(cmds) >= 9, f"`memplan --help` lists {cmds}")
    helps = {c: help_options(memplan, c) for c in cmds}
    owners = {}
    for names, meaning, takers in rows:
        for name in names:
            check(name not in owners, f"{name} has two rows in the table")
            owners[name] = set(takers)
            for c in takers:
                check(c in helps, f"the table gives {name} to `{c}`, which `memplan --help` does not list")
                if c not in helps:
                    continue
                check(name in helps[c], f"`{c} --help` lacks {name}, which the table says it takes ({meaning})")
                if name in helps[c]:
                    check(says(helps[c][name], meaning),
                          f"`{c} --help` describes {name} as \"{helps[c][name]}\", not in the table's words \"{meaning}\"")
    for c, opts in helps.items():
        for name in opts:
            if name in owners:
                check(c in owners[name], f"`{c} --help` lists {name}, which the table gives to {sorted(owners[name])} "
                                         "only: the same name for another thing")
    for name in sorted({n for opts in helps.values() for n in opts} - set(owners)):
        takers = [c for c in helps if name in helps[c]]
        check(len(takers) < 2, f"{name} is taken by {takers} but is not in the table")
    return helps


def check_deprecated(memplan, samples, helps):
    hidden = {"analyze": ["--plan"], "plan": ["--plan"], "fit": ["--gpus", "--profile"], "trace": ["--profile"],
              "train": ["--dp-world", "--dp-rank", "--dp-id"]}
    for c, names in hidden.items():
        for name in names:
            check(name not in helps.get(c, {}), f"`{c} --help` still lists the old name {name}")
    mlp = os.path.join(samples, "models", "tiny_mlp.onnx")
    with tempfile.TemporaryDirectory() as d:
        def old(args, warning, ok, what):
            r = run(memplan, *args)
            check(r.stderr.count(warning) == 1, f"{what}: stderr does not say \"{warning}\" once: {r.stderr.strip()[:300]}")
            check(ok(r), f"{what}: exit {r.returncode}, {r.stderr.strip()[:300]}")

        for c, extra in (("analyze", []), ("plan", ["--train"])):
            out = os.path.join(d, c + ".plan.json")
            old([c, mlp, *extra, "--plan", out], "--plan on analyze/plan is now --save-plan",
                lambda r, out=out: r.returncode == 0 and os.path.getsize(out) > 0, f"{c} --plan FILE writes the plan")
        missing = os.path.join(d, "no_such_profile.json")
        old(["trace", mlp, "--profile", missing, "-o", os.path.join(d, "t.json")], "--profile on fit/trace is now --device-profile",
            lambda r: r.returncode != 0 and "no_such_profile.json" in r.stderr, "trace --profile FILE reads the device profile")
        old(["fit", mlp, "--budget", "1GiB", "--max-gpus", "1", "--profile", missing], "--profile on fit/trace is now --device-profile",
            lambda r: r.returncode != 0 and "no_such_profile.json" in r.stderr, "fit --profile FILE reads the device profile")
        old(["fit", mlp, "--budget", "1GiB", "--gpus", "2", "--microbatches", "2"], "--gpus on fit is now --max-gpus",
            lambda r: r.returncode == 2 and "--max-gpus" in r.stderr, "fit --gpus N searches up to N GPUs")
        old(["train", mlp, "--steps", "1", "--dp-world", "1", "--json"], "--dp-world on train is now --gpus",
            lambda r: r.returncode == 0 and '"reduce_calls"' in r.stdout, "train --dp-world N is the world size")
        old(["train", mlp, "--gpus", "1", "--dp-rank", "3"], "--dp-rank on train is now --rank",
            lambda r: r.returncode == 2 and "--rank 3" in r.stderr, "train --dp-rank R is the rank")
        old(["train", mlp, "--gpus", "2", "--dp-id", os.path.join(d, "id")], "--dp-id on train is now --nccl-id-file",
            lambda r: r.returncode == 2 and "--backend cpu" in r.stderr, "train --dp-id FILE is the NCCL id file")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--memplan", required=True)
    ap.add_argument("--samples", required=True)
    a = ap.parse_args()
    if not os.path.exists(a.memplan):
        print(f"skip: {a.memplan} is not built")
        return 77
    doc = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "docs", "commands.md")
    helps = check_table(a.memplan, doc)
    check_deprecated(a.memplan, a.samples, helps)
    print("ok" if not FAILS else f"{len(FAILS)} failure(s)")
    return 1 if FAILS else 0


if __name__ == "__main__":
    sys.exit(main())
