"""A program instrumented with the Antithesis Python SDK (the `antithesis` package from PyPI),
run under deja by crates/deja-cli/tests/antithesis.rs: the SDK loads /usr/lib/libvoidstar.so
through ctypes, and its get_random draws are decisions of the run."""
import sys
from antithesis.assertions import always, sometimes, reachable, unreachable
from antithesis.lifecycle import setup_complete, send_event
from antithesis.random import get_random

setup_complete({"stage": "start"})
draws = [get_random() for _ in range(3)]
print("draws", [d % 16 for d in draws])
total = sum(d % 4 for d in draws)
always(total < 12, "the total stays under twelve", {"total": total})
sometimes(draws[0] % 2 == 0, "the first draw is even", {"first": draws[0] % 16})
reachable("the program ends", None)
if "--buggy" in sys.argv:
    always(False, "the buggy path holds", {"why": "it does not"})
send_event("done", {"total": total})
