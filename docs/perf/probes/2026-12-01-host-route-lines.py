#!/usr/bin/env python3
"""Counts the distinct cache lines and pages, code and data, that the main
thread touched between host_route_lines.rs's markers in a lackey trace, and
names the functions whose code lines they were (addr2line).

usage: host-route-lines.py BINARY MARKER_HEX TRACE"""
import collections, re, subprocess, sys

binary, marker, trace = sys.argv[1], int(sys.argv[2], 16), sys.argv[3]
symbol = next(l for l in subprocess.run(['nm', binary], capture_output=True, text=True).stdout.splitlines()
              if "MARKER" in l and "host_route_lines" in l)
bias = marker - int(symbol.split()[0], 16)
lines = open(trace, 'rb').read().decode('latin1').splitlines()
at = {}
for i, l in enumerate(lines):
    if l.startswith(' L '):
        try:
            a = int(l[3:].split(',')[0], 16)
        except ValueError:
            continue
        for name, off in (('start', 0), ('submitted', 0x40), ('end', 0x78)):
            if a == marker + off:
                at[name] = i

def main_thread(a, b):
    """The trace lines of thread 1 (main) in [a, b), by valgrind's scheduler lines."""
    current = None
    for l in reversed(lines[:a]):
        m = re.search(r'SCHED\[(\d+)\]:\s+acquired', l)
        if m:
            current = int(m.group(1))
            break
    for l in lines[a:b]:
        if 'SCHED[' in l:
            m = re.search(r'SCHED\[(\d+)\]:\s+acquired', l)
            if m:
                current = int(m.group(1))
            continue
        if current == 1:
            yield l

def report(a, b, name):
    code, data = {}, {}
    for l in main_thread(a, b):
        try:
            addr = int(l[3:].split(',')[0], 16)
        except ValueError:
            continue
        (code if l.startswith('I') else data).setdefault(addr >> 6, addr)
    pages = lambda d: len({line >> 6 for line in d})
    print(f'{name}: code {len(code)} lines on {pages(code)} pages; data {len(data)} lines on {pages(data)} pages')
    names = subprocess.run(['addr2line', '-f', '-C', '-e', binary] + [hex(x - bias) for x in code.values()],
                           capture_output=True, text=True).stdout.splitlines()[::2]
    per = collections.Counter(n[:100] for n in names)
    for n, c in per.items():
        print(f'  {c:3} {n}')
    print('  data lines by page:', ', '.join(f'{p << 12:#x}: {c}' for p, c in
                                           collections.Counter(l >> 6 for l in data).items()))

report(at['start'], at['submitted'], 'submit')
report(at['submitted'], at['end'], 'wait and drop')
