"""The parser of a lesson's source, ``notebooks/<lang>/<chapter>.md``
(its format is described in tools/notebooks.py): tools/notebooks.py
builds the notebooks from what it returns, tools/library.py the #@save
code of d2lpar's backends. Standard library only."""
import re

FENCE = re.compile(r'^```\{\.python \.(input|output)\}\s*$')
TAB = re.compile(r'^#@tab (pytorch|mxnet|all)\s*$')
BEGIN_TAB = re.compile(r'^:begin_tab:`(pytorch|mxnet)`\s*$')
HEADING = re.compile(r'^(#{1,3}) ')
BEGIN_SOLUTIONS, END_SOLUTIONS = ':begin_solutions:', ':end_solutions:'


class SourceError(ValueError):
    pass


def parse(text, where, part='lesson'):
    """Split a source into blocks: ('md', fw|None, text, None) and
    ('input'|'output', fw, lines, 'where:line'), those of the lesson
    (part='lesson') or those between :begin_solutions: and
    :end_solutions: (part='solutions')."""
    blocks, prose, tab = [], [], None
    lines = text.splitlines()
    i = 0
    inside, opened = False, None  # in the solutions block; its line

    def keep():
        return inside == (part == 'solutions')

    def flush():
        if ''.join(prose).strip() and keep():
            blocks.append(('md', tab, '\n'.join(prose).strip('\n'), None))
        prose.clear()

    while i < len(lines):
        line = lines[i]
        m = FENCE.match(line)
        if m:
            flush()
            end = i + 1
            while end < len(lines) and lines[end] != '```':
                end += 1
            if end == len(lines):
                raise SourceError(f'{where}:{i + 1}: unclosed code fence')
            body = lines[i + 1:end]
            t = TAB.match(body[0]) if body else None
            if not t:
                raise SourceError(f'{where}:{i + 2}: a fence must start '
                                  f'with #@tab pytorch|mxnet|all')
            if inside and '#@check' in body:
                raise SourceError(f'{where}:{i + 1}: #@check in the '
                                  f'solutions: their outputs are not compared '
                                  f'(tools/pin_outputs.py pins the lessons)')
            if keep():
                blocks.append((m.group(1), t.group(1), body[1:],
                               f'{where}:{i + 1}'))
            i = end + 1
            continue
        if line.strip() in (BEGIN_SOLUTIONS, END_SOLUTIONS):
            begin = line.strip() == BEGIN_SOLUTIONS
            if tab:
                raise SourceError(f'{where}:{i + 1}: {line.strip()} inside '
                                  f'a tab ({tab}); close the tab first')
            if begin and opened:
                raise SourceError(f'{where}:{i + 1}: a second '
                                  f'{BEGIN_SOLUTIONS} (one block per lesson)')
            if not begin and not inside:
                raise SourceError(f'{where}:{i + 1}: {END_SOLUTIONS} without '
                                  f'{BEGIN_SOLUTIONS}')
            flush()
            inside = begin
            opened = opened or i + 1
            i += 1
            continue
        b = BEGIN_TAB.match(line)
        if b:
            flush()
            tab = b.group(1)
        elif line.strip() == ':end_tab:':
            flush()
            tab = None
        elif HEADING.match(line):
            flush()  # a heading starts a new markdown cell
            prose.append(line)
        else:
            prose.append(line)
        i += 1
    if inside:
        raise SourceError(f'{where}:{opened}: {BEGIN_SOLUTIONS} without '
                          f'{END_SOLUTIONS}')
    flush()
    return blocks
