"""``liken-media run``: query at start, publish, and query again only for new render nodes.

render-node-capabilities.txt: "The agent queries each render node once, when its pod starts or
when liken publishes a new render node. A new image of the agent, and so a new driver, starts a
new pod. No timer queries again." So the agent watches the node's ``<node>-liken.sh`` slice and,
when it names a render node the agent has not seen (or drops one), walks liken's inventory again
(the same :class:`~liken_devices.inventory.Sources` walk, never another way through sysfs),
queries only the render nodes it has not seen, and republishes ``<node>-media.liken.sh``. It
also watches its own slice, so the slice comes back when the kubelet deletes it (dra-api.md 6.3),
without asking any driver again. The only wake-ups are watch events and the publisher's retries
after an API failure.
"""

from __future__ import annotations

import argparse
import logging
import signal
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from ..inventory.sources import Sources
from .devices import DRIVER, MediaDevice, query_devices, render_devices
from .probe import DEFAULT_TIMEOUT

log = logging.getLogger("liken_devices.media")

LIKEN_DRIVER = "liken.sh"


def liken_render_names(obj: Mapping[str, Any] | None) -> frozenset[str]:
    """The render devices a ``liken.sh`` slice lists (``renderNode: true``)."""
    devices = ((obj or {}).get("spec") or {}).get("devices") or []
    names = set()
    for d in devices:
        attr = (d.get("attributes") or {}).get("renderNode") or {}
        if attr.get("bool") is True and isinstance(d.get("name"), str):
            names.add(d["name"])
    return frozenset(names)


class MediaAgent:
    """The agent's state: the render nodes it has asked, and the slice it keeps published."""

    def __init__(self, sources: Sources, publisher: Any, dev_root: Path = Path("/dev"),
                 timeout: float = DEFAULT_TIMEOUT, env: Mapping[str, str] | None = None,
                 command: Sequence[str] | None = None) -> None:
        self.sources = sources
        self.publisher = publisher
        self.dev_root = dev_root
        self.timeout = timeout
        self.env = env
        self.command = command
        self.known: dict[str, MediaDevice] = {}
        self.queried: list[str] = []  # every render device asked, in order (one entry per query)
        self.walks = 0
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._recheck = False  # liken's slice names render nodes other than the known ones

    # ---- what the watches report (watch threads) ------------------------------------------

    def on_liken_slice(self, event: str, obj: dict[str, Any] | None) -> None:
        """An event of ``<node>-liken.sh``: recheck when its render nodes are not ours."""
        if event == "DELETED":
            return  # the kubelet wiped it; liken writes it again, and then we look
        if event != "RESYNC" and obj is not None:
            names = liken_render_names(obj)
            with self._lock:
                if names == frozenset(self.known):
                    return
        with self._lock:
            self._recheck = True
        self._wake.set()

    def on_own_slice(self, event: str, obj: dict[str, Any] | None) -> None:
        if self.publisher.observe(event, obj):
            self._wake.set()

    def wake(self) -> None:
        self._wake.set()

    # ---- the work (main thread) ----------------------------------------------------------------

    def refresh(self) -> None:
        """Walk liken's inventory; ask only render nodes not seen yet; set the desired slice."""
        inventory = self.sources.walk()
        self.walks += 1
        renders = {d.name: d for d in render_devices(inventory)}
        with self._lock:
            gone = sorted(set(self.known) - set(renders))
            new = [d for name, d in renders.items() if name not in self.known]
        for name in gone:
            log.info("render node %s is gone: its media device is withdrawn", name)
        # Outside the lock: the queries take up to the timeout, while the watches keep running.
        answers = query_devices(new, self.dev_root, self.timeout, self.env, self.command) \
            if new else []
        with self._lock:
            for name in gone:
                self.known.pop(name, None)
            for media in answers:
                self.known[media.name] = media
                self.queried.append(media.name)
            devices = [m.to_api() for m in sorted(self.known.values(), key=lambda m: m.name)]
        self.publisher.set_devices(devices)

    def run(self, stop: threading.Event, watches: Sequence[Any] = ()) -> None:
        """Ask at start, publish, then act on watch events until ``stop`` is set."""
        self.refresh()
        for w in watches:
            w.start()
        try:
            while not stop.is_set():
                with self._lock:
                    recheck, self._recheck = self._recheck, False
                if recheck:
                    self.refresh()
                self.publisher.sync()
                # No timer: sleep until a watch event, a stop, or a publishing retry falls due.
                self._wake.wait(self.publisher.retry_in())
                self._wake.clear()
        finally:
            for w in watches:
                w.stop()


def run_agent(args: argparse.Namespace, stop: threading.Event | None = None,
              ready: Callable[[MediaAgent], None] | None = None) -> int:
    """The DaemonSet's process: ``liken-media run --node NAME [--kubeconfig FILE]``."""
    from ..cliargs import node_from_args, sources_from_args
    from ..kube import NoClusterConfig, ObjectWatch, Resources, SlicePublisher, make_client

    node = node_from_args(args, DRIVER)
    sources = sources_from_args(args)
    sources.check()
    try:
        client = make_client(args.kubeconfig)
    except NoClusterConfig as exc:
        log.error("liken-media run: %s (give --kubeconfig)", exc)
        return 2
    publisher = SlicePublisher(client, node, driver=DRIVER)
    agent = MediaAgent(sources, publisher, args.dev, args.timeout)
    stop = stop or threading.Event()

    def factory() -> Any:
        return make_client(args.kubeconfig)

    watches = [
        ObjectWatch(factory, Resources.slice(), {"spec.nodeName": node,
                                                 "spec.driver": LIKEN_DRIVER},
                    agent.on_liken_slice, "liken-slice"),
        ObjectWatch(factory, Resources.slice(), {"spec.nodeName": node, "spec.driver": DRIVER},
                    agent.on_own_slice, "media-slice"),
    ]

    def on_signal(signum: int, _frame: Any) -> None:
        log.info("liken-media: signal %d, stopping", signum)
        stop.set()
        agent.wake()

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, on_signal)
        signal.signal(signal.SIGINT, on_signal)
    if ready is not None:
        ready(agent)
    try:
        agent.run(stop, watches)
    finally:
        client.close()
    return 0
