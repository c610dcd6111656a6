"""A rank's probe thread answers a stacks request with every other thread's stack, read under the interpreter lock,
in faulthandler's format (what the hang watch parses), where faulthandler's signal handler would walk the frames
of threads running Python without it."""

from __future__ import annotations

import threading

from rnnprof.recording.hang_probe import STACKS_END, all_stacks
from rnnprof.traces.stack_dump import MAIN_MARK, parse_stacks


def _blocked_here(ready: threading.Event, release: threading.Event) -> None:
    ready.set()
    release.wait()  # the line the dump must name


def test_every_other_thread_is_dumped_where_it_waits_and_the_dump_parses_as_faulthandlers():
    ready, release = threading.Event(), threading.Event()
    waiter = threading.Thread(target=_blocked_here, args=(ready, release))
    waiter.start()
    ready.wait()
    answer = []
    asker = threading.Thread(target=lambda: answer.append(all_stacks()))  # as the probe thread: not the main one
    asker.start()
    asker.join()
    release.set()
    waiter.join()
    text = answer[0]
    assert text.endswith(STACKS_END)
    stacks = parse_stacks(f"{MAIN_MARK}0x{threading.main_thread().ident:016x}\n{text}", rank=3)
    by_ident = {t.ident: t for t in stacks.threads}
    assert f"0x{asker.ident:016x}" not in by_ident  # the answering thread leaves itself out
    main = by_ident[f"0x{threading.main_thread().ident:016x}"]
    # the main thread, waiting in asker.join() in this test
    assert main.main and any(f.function.startswith("test_every_other_thread") and f.file == __file__
                             for f in main.frames)
    blocked = by_ident[f"0x{waiter.ident:016x}"]
    line = _blocked_here.__code__.co_firstlineno + 2
    assert any(f.function == "_blocked_here" and f.line == line and f.file == __file__ for f in blocked.frames)
    assert blocked.frames[0].function == "wait"  # innermost first: threading.Event.wait's own frames
