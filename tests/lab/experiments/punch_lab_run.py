"""Run ``punch_lab.py`` across a NAT lab (root; uses the lab harness in tests/lab).

    sudo python tests/lab/experiments/punch_lab_run.py cone cone
    sudo python tests/lab/experiments/punch_lab_run.py cone symmetric

The lab (uniquely named namespaces) and every process in it are removed at the end.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))  # the checkout: tests.lab

from tests.lab.natlab import NatLab

HERE = Path(__file__).resolve().parent


def main() -> None:
    nat1, nat2 = ([*sys.argv[1:3], "cone", "cone"])[:2]
    script = str(HERE / "punch_lab.py")
    with NatLab(nat1, nat2) as lab:  # type: ignore[arg-type]
        pub = lab.spawn("pub", [sys.executable, script, "pub"], stdout=subprocess.PIPE)
        assert pub.stdout is not None
        pub.stdout.readline()  # ready
        a = lab.spawn("h1", [sys.executable, script, "a"], stdout=subprocess.PIPE)
        time.sleep(0.2)
        b = lab.spawn("h2", [sys.executable, script, "b"], stdout=subprocess.PIPE)
        for name, proc in (("a", a), ("b", b)):
            out, _ = proc.communicate(timeout=120)
            print(f"{name} ({nat1 if name == 'a' else nat2} NAT):", out.decode().strip())


if __name__ == "__main__":
    main()
