"""The process that keeps one serial line attached to serio: ``python -m ...holder TTY_FD LIFE_FD``.

Kernel fact (drivers/input/serio/serport.c): the serio port of a tty in the N_MOUSE line
discipline exists only while a ``read()`` on that tty is in progress. The read registers the
port, sleeps until the line hangs up (an unplug) or the reader is interrupted, then unregisters
the port and returns 0. So "holding the attachment" means a process blocked in that read, the
job ``inputattach`` does on a general-purpose distribution.

The agent configures the line itself (:mod:`.serio`) and hands the open tty to this process,
which only reads. It ends, releasing the attachment, when:

* the read returns (the kernel ended the attachment: the adapter was unplugged), exit status 0;
* the read fails with EBUSY, status 3 (:data:`BUSY`; rules: serial.across-restarts): another
  process already reads this line's serio port (serport allows one reader: during a surge
  upgrade the old instance of the agent still holds it), so the line is not this process's to
  hold yet;
* the read fails otherwise, status 1;
* its lifeline pipe reaches end-of-file, because the agent released the line or died; the
  process then exits at once, and the exit interrupts the blocked read. So no holder outlives
  the agent that started it.

What happened is written as one line on stderr, for the agent's status message.
"""

from __future__ import annotations

import errno
import os
import sys
import threading

BUSY = 3  # the exit status when another process holds the line's serio port


def _watch_lifeline(fd: int) -> None:
    try:
        while os.read(fd, 64):
            pass
    except OSError:
        pass
    # End of file: the agent is gone or released the line. os._exit ends the blocked read too.
    os._exit(0)


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python -m liken_devices.machine.holder TTY_FD LIFELINE_FD", file=sys.stderr)
        return 2
    tty_fd, life_fd = int(argv[0]), int(argv[1])
    threading.Thread(target=_watch_lifeline, args=(life_fd,), daemon=True).start()
    try:
        while True:
            # In N_MOUSE this read blocks for the whole attachment and returns b"" when the
            # kernel ends it. (On a line in another discipline it returns data: keep reading.)
            if not os.read(tty_fd, 4096):
                print("the kernel ended the attachment (the line hung up)", file=sys.stderr)
                return 0
    except OSError as exc:
        print(f"read on the line failed: [Errno {exc.errno}] {exc.strerror}", file=sys.stderr)
        return BUSY if exc.errno == errno.EBUSY else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
