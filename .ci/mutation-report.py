#!/usr/bin/env python3
# Part of .ci/mutation: reads gremlins' JSON reports, leaves out the mutants
# .ci/mutation-equivalent.txt lists, prints a table and fails below the
# threshold.
# Usage: mutation-report.py THRESHOLD EQUIVALENT_FILE NAME=PKGDIR=GREMLINS.json[=CASES.json]...
import json
import re
import sys

threshold = float(sys.argv[1])
equiv_path = sys.argv[2]
FUNC = re.compile(r'^func\s+(?:\([^)]*\)\s*)?([A-Za-z0-9_]+)')

def read_equivalents(path):
    """Records are two lines: "FILE FUNC MUTATOR COLUMN: reason", then the
    mutated line, trimmed, indented by four spaces."""
    out, head = {}, None
    with open(path) as f:
        for n, line in enumerate(f, 1):
            line = line.rstrip('\n')
            if not line.strip() or line.startswith('#'):
                continue
            if line.startswith('    '):
                if head is None:
                    sys.exit(f'{path}:{n}: a code line without a record before it')
                out[head[0] + (line.strip(),)] = (n - 1, head[1])
                head = None
                continue
            if head is not None:
                sys.exit(f'{path}:{n - 1}: record without its code line')
            key, sep, why = line.partition(': ')
            parts = key.split()
            if not sep or len(parts) != 4 or not why.strip():
                sys.exit(f'{path}:{n}: want "FILE FUNC MUTATOR COLUMN: reason"')
            head = (tuple(parts), why)
    if head is not None:
        sys.exit(f'{path}: the last record has no code line')
    return out

def fingerprint(path, line, col, mutator):
    with open(path) as f:
        lines = f.read().split('\n')
    if line > len(lines):
        sys.exit(f'{path} has no line {line}: was it changed during the run?')
    text = lines[line - 1]
    trimmed = text.strip()
    indent = len(text) - len(text.lstrip())
    func, start = '-', 0
    for i in range(line - 1, -1, -1):
        m = FUNC.match(lines[i])
        if m:
            func, start = m.group(1), i
            break
    # The same line twice in a function: the second is FUNC/2.
    seen = sum(1 for l in lines[start:line] if l.strip() == trimmed)
    if seen > 1:
        func += '/' + str(seen)
    return (path, func, mutator, str(col - indent), trimmed)

equivalents = read_equivalents(equiv_path)
used = set()
rows, failed, problems = [], False, []


def mutations(report):
    """(file name, mutation) pairs of a gremlins-format report."""
    with open(report) as f:
        data = json.load(f)
    return [(f['file_name'], m) for f in data.get('files') or [] for m in f['mutations']]


for arg in sys.argv[3:]:
    # NAME=PKGDIR=GREMLINS.json[=CASES.json]: casemut's results replace
    # gremlins' "not covered" for the mutants of case conditions.
    name, pkg, report, *cases = arg.split('=')
    found = mutations(report)
    override = {}
    for fname, m in (mutations(cases[0]) if cases else []):
        override[(fname, m['line'], m['column'], m['type'])] = m
    seen = set()
    merged = []
    for fname, m in found:
        k = (fname, m['line'], m['column'], m['type'])
        if k in override:
            seen.add(k)
            m = override[k]
        merged.append((fname, m))
    merged += [(k[0], m) for k, m in override.items() if k not in seen]
    n = {'KILLED': 0, 'LIVED': 0, 'TIMED OUT': 0, 'NOT COVERED': 0, 'NOT VIABLE': 0}
    equiv = 0
    reported = set()
    for fname, m in merged:
        path = pkg + '/' + fname
        reported.add(path)
        status = m['status']
        key = fingerprint(path, m['line'], m['column'], m['type'])
        if key in equivalents:
            used.add(key)
            if status == 'LIVED':
                equiv += 1
                continue
            if status == 'KILLED':
                problems.append(f'{equiv_path}:{equivalents[key][0]}: listed as equivalent, but killed now: '
                                f'{m["type"]} at {path}:{m["line"]}:{m["column"]}: remove the entry')
        n[status] = n.get(status, 0) + 1
        if status == 'LIVED':
            problems.append(f'lived: {m["type"]} at {path}:{m["line"]}:{m["column"]}  {key[4]}'
                            f'  (equivalence key: {key[0]} {key[1]} {key[2]} {key[3]})')
    reached = n['KILLED'] + n['LIVED']
    eff = 100.0 * n['KILLED'] / reached if reached else 100.0
    if eff < threshold:
        failed = True
    # A timed-out mutant counts neither way. A few are mutants that loop; many
    # mean the runs were given too little time, and the efficacy means nothing.
    ran = reached + n['TIMED OUT']
    if ran and n['TIMED OUT'] > ran // 10:
        problems.append(f'{name}: {n["TIMED OUT"]} of {ran} mutants timed out: '
                        'the machine is too loaded, or the coverage run was too quick to time the tests')
        failed = True
    rows.append((name, pkg, n['KILLED'], n['LIVED'], equiv, n['TIMED OUT'], n['NOT COVERED'], eff))
    # Entries for this target's files that matched no mutant: the line changed.
    for key, (line, _) in equivalents.items():
        if key[0] in reported and key not in used:
            problems.append(f'{equiv_path}:{line}: matches no mutant of {key[0]} any more: update or remove it')
            failed = True

for p in problems:
    print(p)
print()
print('| target | package | killed | lived | equivalent | timed out | not covered | efficacy |')
print('|---|---|---|---|---|---|---|---|')
for name, pkg, k, l, e, t, nc, eff in rows:
    print(f'| {name} | {pkg} | {k} | {l} | {e} | {t} | {nc} | {eff:.1f}% |')
if any(p.startswith(equiv_path) and 'killed now' in p for p in problems):
    failed = True
if failed:
    print(f'\nmutation: efficacy below {threshold:g}%, too many timeouts, or the equivalent list out of date (see above)')
    sys.exit(1)
