"""Build real sysfs trees for tests: directories, symlinks, ``uevent`` and ``dev`` files.

The tree looks like the kernel's: devices under ``devices/``, a ``subsystem`` link in each device
directory, the ``bus/<bus>/devices`` and ``class/<class>`` indexes, ``driver`` links into
``bus/<bus>/drivers/<name>``, and ``dev/char``/``dev/block`` links for every node. The reader
under test walks it exactly as it walks ``/sys``.

    b = SysfsBuilder(tmp_path)
    gpu = b.pci("0000:00:02.0", driver="i915", vendor="8086", device="46a6", cls=0x030000)
    b.node(gpu, "drm", "renderD128", 226, 128, devname="dri/renderD128", subdir="drm")
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from liken_devices.inventory import Sources
from liken_devices.sysfs.reader import BUSES as READER_BUSES

# cec is a bus too: the CEC core puts its adapters on ``cec_bus_type`` (/sys/bus/cec/devices).
BUSES = {"pci", "usb", "platform", "acpi", "pnp", "serio", "hid", "virtio", "scsi", "i2c", "cec"}


@dataclass(frozen=True)
class Dev:
    path: str  # "/devices/pci0000:00/0000:00:02.0"

    @property
    def name(self) -> str:
        return self.path.rsplit("/", 1)[-1]


class SysfsBuilder:
    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        (self.root / "devices").mkdir(parents=True, exist_ok=True)
        for bus in READER_BUSES:
            (self.root / "bus" / bus / "devices").mkdir(parents=True, exist_ok=True)
        for kind in ("char", "block"):
            (self.root / "dev" / kind).mkdir(parents=True, exist_ok=True)

    # -- generic ---------------------------------------------------------------------------------

    def dir(self, dev: Dev | str) -> Path:
        path = dev.path if isinstance(dev, Dev) else dev
        return self.root / path.lstrip("/")

    def device(self, parent: Dev | str | None, name: str, subsystem: str | None,
               props: dict[str, str] | None = None, *, driver: str | None = None,
               attrs: dict[str, str | bytes] | None = None, subdir: str | None = None,
               is_class: bool = False) -> Dev:
        """A device directory; ``is_class``: in the class of that name even where a bus has the
        same name (older kernels' ``usb`` class beside the ``usb`` bus)."""
        base = parent.path if isinstance(parent, Dev) else (parent or "/devices")
        path = f"{base}/{subdir}/{name}" if subdir else f"{base}/{name}"
        d = self.dir(path)
        d.mkdir(parents=True, exist_ok=True)
        props = dict(props or {})
        if driver:
            props.setdefault("DRIVER", driver)
        (d / "uevent").write_text("".join(f"{k}={v}\n" for k, v in props.items()))
        for key, value in (attrs or {}).items():
            f = d / key
            f.parent.mkdir(parents=True, exist_ok=True)
            f.write_bytes(value if isinstance(value, bytes) else (value + "\n").encode())
        if subsystem:
            is_bus = subsystem in BUSES and not is_class
            kind_dir = self.root / ("bus" if is_bus else "class") / subsystem
            self._link(d / "subsystem", kind_dir)
            self._link((kind_dir / "devices" if is_bus else kind_dir) / name, d)
            if driver and is_bus:
                drv = kind_dir / "drivers" / driver
                drv.mkdir(parents=True, exist_ok=True)
                self._link(d / "driver", drv)
        return Dev(path)

    def node(self, parent: Dev | str, subsystem: str, name: str, major: int, minor: int, *,
             devname: str | None = None, block: bool = False, subdir: str | None = None,
             props: dict[str, str] | None = None, is_class: bool = False) -> Dev:
        """A class device with a device node (``dev`` file, MAJOR/MINOR/DEVNAME in uevent)."""
        all_props = {"MAJOR": str(major), "MINOR": str(minor), "DEVNAME": devname or name}
        all_props.update(props or {})
        dev = self.device(parent, name, "block" if block else subsystem, all_props,
                          attrs={"dev": f"{major}:{minor}"}, subdir=subdir, is_class=is_class)
        kind = "block" if block else "char"
        self._link(self.root / "dev" / kind / f"{major}:{minor}", self.dir(dev))
        return dev

    def remove(self, dev: Dev) -> None:
        """Unplug: the device directory and every index link into it go away."""
        target = self.dir(dev)
        for index in (self.root / "bus", self.root / "class", self.root / "dev"):
            for link in index.rglob("*"):
                if link.is_symlink():
                    resolved = Path(os.path.normpath(link.parent / os.readlink(link)))
                    if resolved == target or target in resolved.parents:
                        link.unlink()
        shutil.rmtree(target, ignore_errors=True)

    def set_driver(self, dev: Dev, bus: str, driver: str | None) -> None:
        """Bind or unbind a driver (the ``driver`` link and uevent's DRIVER)."""
        d = self.dir(dev)
        link = d / "driver"
        if link.is_symlink():
            link.unlink()
        lines = [x for x in (d / "uevent").read_text().splitlines() if not x.startswith("DRIVER=")]
        if driver:
            drv = self.root / "bus" / bus / "drivers" / driver
            drv.mkdir(parents=True, exist_ok=True)
            self._link(link, drv)
            lines.append(f"DRIVER={driver}")
        (d / "uevent").write_text("".join(x + "\n" for x in lines))

    def console(self, *names: str, tty0_active: str | None = None) -> None:
        con = self.device("/devices/virtual/tty", "console", "tty", {"MAJOR": "5", "MINOR": "1"},
                          attrs={"active": " ".join(names)})
        del con
        if tty0_active is not None:
            self.device("/devices/virtual/tty", "tty0", "tty", {"MAJOR": "4", "MINOR": "0"},
                        attrs={"active": tty0_active})

    @staticmethod
    def _link(at: Path, target: Path) -> None:
        at.parent.mkdir(parents=True, exist_ok=True)
        if at.is_symlink():
            at.unlink()
        at.symlink_to(os.path.relpath(target, at.parent))

    # -- buses -----------------------------------------------------------------------------------

    def pci(self, address: str, *, driver: str | None = None, vendor: str = "8086",
            device: str = "1234", cls: int = 0xFF0000, parent: Dev | None = None,
            numa_node: str | None = None) -> Dev:
        """A PCI function; ``numa_node`` is the attribute's text (the kernel writes ``-1`` for
        a machine without NUMA; None leaves the file out, as an old recording does)."""
        host = parent or self._host(address)
        props = {"PCI_CLASS": f"{cls:X}", "PCI_ID": f"{vendor.upper()}:{device.upper()}",
                 "PCI_SLOT_NAME": address,
                 "MODALIAS": f"pci:v0000{vendor.upper()}d0000{device.upper()}sv00000000"
                             f"sd00000000bc{cls >> 16:02X}sc{(cls >> 8) & 0xFF:02X}"
                             f"i{cls & 0xFF:02X}"}
        attrs = {"vendor": f"0x{vendor}", "device": f"0x{device}", "class": f"0x{cls:06x}"}
        if numa_node is not None:
            attrs["numa_node"] = numa_node
        return self.device(host, address, "pci", props, driver=driver, attrs=attrs)

    def _host(self, address: str) -> str:
        domain, bus = address.split(":")[:2]
        return f"/devices/pci{domain}:{bus}"

    def usb_device(self, name: str, *, parent: Dev | None = None, busnum: int = 1,
                   devnum: int = 2, vendor: str = "1234", product: str = "5678",
                   serial: str | bytes | None = None, manufacturer: str | None = None,
                   product_name: str | None = None, dev_class: str = "00") -> Dev:
        """A usb_device with its usbfs node (char 189, bus/usb/BBB/DDD)."""
        base = parent or Dev("/devices/pci0000:00/0000:00:14.0")
        if parent is None and not self.dir(base).exists():
            self.pci("0000:00:14.0", driver="xhci_hcd", cls=0x0C0330)
        devname = f"bus/usb/{busnum:03d}/{devnum:03d}"
        props = {"DEVTYPE": "usb_device",
                 "PRODUCT": f"{int(vendor, 16):x}/{int(product, 16):x}/100",
                 "TYPE": f"{int(dev_class, 16)}/0/0", "BUSNUM": f"{busnum:03d}",
                 "DEVNUM": f"{devnum:03d}", "MAJOR": "189",
                 "MINOR": str((busnum - 1) * 128 + devnum - 1), "DEVNAME": devname}
        attrs: dict[str, str | bytes] = {"idVendor": vendor, "idProduct": product,
                                         "bDeviceClass": dev_class, "busnum": str(busnum),
                                         "devnum": str(devnum),
                                         "dev": f"189:{(busnum - 1) * 128 + devnum - 1}"}
        if serial is not None:
            attrs["serial"] = serial
        if manufacturer:
            attrs["manufacturer"] = manufacturer
        if product_name:
            attrs["product"] = product_name
        dev = self.device(base, name, "usb", props, driver="usb", attrs=attrs)
        self._link(self.root / "dev" / "char" / f"189:{(busnum - 1) * 128 + devnum - 1}",
                   self.dir(dev))
        return dev

    def usb_interface(self, usb: Dev, number: str = "1.0", *, driver: str | None = None,
                      cls: int = 0xFF) -> Dev:
        name = f"{usb.name}:{number}"
        props = {"DEVTYPE": "usb_interface", "INTERFACE": f"{cls}/0/0",
                 "MODALIAS": f"usb:v1234p5678d0100dc00dsc00dp00ic{cls:02X}isc00ip00in00"}
        return self.device(usb, name, "usb", props, driver=driver,
                           attrs={"bInterfaceClass": f"{cls:02x}",
                                  "bInterfaceNumber": number.split(".")[1].zfill(2)})

    def board(self, bus: str, name: str, *, driver: str | None = None,
              parent: Dev | str | None = None, modalias: str | None = None) -> Dev:
        base = parent or {"platform": "/devices/platform", "acpi": "/devices/LNXSYSTM:00",
                          "pnp": "/devices/pnp0"}[bus]
        props = {"MODALIAS": modalias or f"{bus}:{name}"}
        return self.device(base, name, bus, props, driver=driver)

    # -- common hardware ------------------------------------------------------------------------

    def gpu(self, address: str = "0000:00:02.0", *, card: int = 0, render: int | None = 128,
            driver: str = "i915", vendor: str = "8086", device: str = "46a6",
            parent: Dev | None = None, numa_node: str | None = None) -> Dev:
        gpu = self.pci(address, driver=driver, vendor=vendor, device=device, cls=0x030000,
                       parent=parent, numa_node=numa_node)
        self.node(gpu, "drm", f"card{card}", 226, card, devname=f"dri/card{card}", subdir="drm")
        if render is not None:
            self.node(gpu, "drm", f"renderD{render}", 226, render, devname=f"dri/renderD{render}",
                      subdir="drm")
        return gpu

    def dp_cec(self, gpu: Dev, *, cec: int = 0, rc: int = 0, event: int = 7,
               connector: str = "card0-DP-1") -> Dev:
        """A GPU's DisplayPort outputs as i915 lays them out, with a DP-CEC adapter.

        The connector's DP AUX channel (``drm/card0/card0-DP-1/drm_dp_aux0``) and its i2c bus,
        a gmbus i2c bus of the GPU (``i2c-3``), and the CEC adapter that drm_dp_cec registers
        when a branch device passes CEC: ``cecN`` on the ``cec`` bus, whose parent is the GPU's
        PCI device itself (``.../0000:00:02.0/cec0``), with the remote-control device the CEC core
        registers beside it (``rc/rcN/inputM/eventE``; no LIRC node for a CEC-only remote).
        """
        conn = self.device(gpu, connector, "drm", {"DEVTYPE": "drm_connector"},
                           subdir="drm/card0")
        self.node(conn, "drm_dp_aux_dev", "drm_dp_aux0", 237, 0)
        ddc = self.device(conn, "i2c-6", "i2c")
        self.node(ddc, "i2c-dev", "i2c-6", 89, 6, subdir="i2c-dev")
        gmbus = self.device(gpu, "i2c-3", "i2c")
        self.node(gmbus, "i2c-dev", "i2c-3", 89, 3, subdir="i2c-dev")
        adapter = self.node(gpu, "cec", f"cec{cec}", 242, cec)
        remote = self.device(gpu, f"rc{rc}", "rc", subdir="rc")
        inp = self.device(remote, f"input{20 + event}", "input")
        self.node(inp, "input", f"event{event}", 13, 64 + event, devname=f"input/event{event}")
        return adapter

    def hda(self, address: str = "0000:00:1f.3", *, card: int = 0, jacks: int = 2) -> Dev:
        hda = self.pci(address, driver="snd_hda_intel", vendor="8086", device="51c8",
                       cls=0x040300)
        c = self.device(hda, f"card{card}", "sound", subdir="sound")
        self.node(c, "sound", f"controlC{card}", 116, 2 + card * 32, devname=f"snd/controlC{card}")
        self.node(c, "sound", f"pcmC{card}D0p", 116, 3 + card * 32, devname=f"snd/pcmC{card}D0p")
        for j in range(jacks):
            n = 20 + card * 8 + j  # one number per jack, as the kernel gives them
            inp = self.device(c, f"input{n}", "input")
            self.node(inp, "input", f"event{n}", 13, 64 + n, devname=f"input/event{n}")
        return hda

    def part(self, kind: str, i: int, *, vendor: str | None = None, product: str | None = None,
             serial: str | None = None) -> Dev:
        """The ``i``-th piece of a generated machine, at addresses and numbers of its own:
        gpu, amdgpu, hda, hid, bt, serial (a USB serial adapter), tpm, wdt, rtc (rtc0) or disk
        (a SATA disk with one partition)."""
        ids = {k: v for k, v in (("vendor", vendor), ("product", product)) if v}
        if kind in ("gpu", "amdgpu"):
            amd = {"driver": "amdgpu", "vendor": "1002", "device": "73bf"} if kind == "amdgpu" \
                else {}
            return self.gpu(f"0000:0{i}:00.0", card=i, render=128 + i, **amd)
        if kind == "hda":
            return self.hda(f"0000:00:1f.{i}", card=i)
        if kind in ("hid", "bt", "serial"):
            bus = {"hid": 1, "bt": 2, "serial": 3}[kind]
            usb = self.usb_device(f"{bus}-{i + 1}", busnum=bus, devnum=i + 2, serial=serial, **ids)
            driver, cls = {"hid": ("usbhid", 3), "bt": ("btusb", 0xE0),
                           "serial": ("cp210x", 0xFF)}[kind]
            iface = self.usb_interface(usb, driver=driver, cls=cls)
            if kind == "hid":
                self.node(iface, "hidraw", f"hidraw{i}", 240, i, subdir="hidraw")
            elif kind == "bt":
                self.device(iface, f"hci{i}", "bluetooth", subdir="bluetooth")
            else:
                self.node(iface, "tty", f"ttyUSB{i}", 188, i, subdir="tty")
            return usb
        if kind == "tpm":
            t = self.board("platform", f"MSFT0101:0{i}", driver="tpm_crb")
            self.node(t, "tpm", f"tpm{i}", 10, 224, subdir="tpm")
            return t
        if kind == "wdt":
            w = self.board("platform", f"iTCO_wdt.{i}", driver="iTCO_wdt")
            self.node(w, "watchdog", f"watchdog{i}", 247, i, subdir="watchdog")
            return w
        if kind == "rtc":
            r = self.board("pnp", f"00:0{i}", driver="rtc_cmos")
            self.node(r, "rtc", "rtc0", 250, 0, subdir="rtc")
            return r
        if kind == "disk":
            s = self.pci(f"0000:00:17.{i}", driver="ahci", cls=0x010601)
            d = self.node(s, "block", f"sd{'abcdefg'[i]}", 8, 16 * i, block=True, subdir="block")
            self.node(d, "block", f"sd{'abcdefg'[i]}1", 8, 16 * i + 1, block=True)
            return s
        raise ValueError(f"no such part: {kind}")


def bare_sources(root: Path) -> Sources:
    """Sources that walk ``root/sys`` (a SysfsBuilder's tree) with empty facts, modules and ID
    directories beside it (made here)."""
    for d in ("facts/storage", "mods", "hw"):
        (root / d).mkdir(parents=True)
    return Sources(sysfs=root / "sys", facts=root / "facts", modules_dir=root / "mods",
                   hwdata_dir=root / "hw")
