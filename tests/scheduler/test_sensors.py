"""Sensors: each gives a value or says why it cannot tell, and none of them raises."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import psutil
import pytest

from core.policy import GpuState
from core.scheduler import (
    ConditionSampler,
    CpuSample,
    CpuShareWindow,
    FallbackIdleSensor,
    FixedIdleSensor,
    GpuSensor,
    LogindIdleSensor,
    MacIdleSensor,
    PolledIdleSensor,
    Reading,
    ScriptedIdleSensor,
    SystemSensor,
    WindowsIdleSensor,
    X11IdleSensor,
    default_idle_sensor,
)
from core.scheduler.idle_logind import idle_from_output, parse_properties
from core.scheduler.idle_macos import parse_hid_idle_time
from core.scheduler.idle_windows import idle_milliseconds
from core.util.clock import FakeClock

# ---- simulated, fixed and combined idle sensors


def test_scripted_idle_sensor_follows_the_simulated_user() -> None:
    clock = FakeClock()
    sensor = ScriptedIdleSensor(30.0, clock=clock)
    assert sensor.idle_seconds() == 30.0
    clock.advance(10)
    assert sensor.idle_seconds() == 40.0
    sensor.user_input()
    assert sensor.idle_seconds() == 0.0
    assert sensor.inputs == (clock.monotonic(),)
    clock.advance(5)
    assert sensor.idle_seconds() == 5.0
    sensor.set_idle(600.0)
    assert sensor.idle_seconds() == 600.0
    assert sensor.note is None
    sensor.set_unknown("pretending to be Wayland")
    assert sensor.idle_seconds() is None
    assert str(sensor.note) == "pretending to be Wayland"
    sensor.user_input()
    assert sensor.idle_seconds() == 0.0
    sensor.close()


def test_scripted_idle_sensor_is_safe_across_threads() -> None:
    sensor = ScriptedIdleSensor(100.0)

    def type_keys() -> None:
        for _ in range(200):
            sensor.user_input()
            assert (sensor.idle_seconds() or 0.0) >= 0.0

    threads = [threading.Thread(target=type_keys) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(sensor.inputs) == 800
    assert (sensor.idle_seconds() or 0.0) < 60.0


def test_fixed_idle_sensor() -> None:
    assert FixedIdleSensor(12.0).idle_seconds() == 12.0
    assert FixedIdleSensor(12.0).note is None
    unknown = FixedIdleSensor(None, "no seat")
    assert unknown.idle_seconds() is None
    assert unknown.note == "no seat"


def test_fallback_takes_the_first_answer_and_joins_the_excuses() -> None:
    first, second = ScriptedIdleSensor(clock=FakeClock()), FixedIdleSensor(50.0)
    first.set_unknown("no X display")
    fallback = FallbackIdleSensor([first, second])
    assert fallback.idle_seconds() == 50.0
    assert fallback.note is None
    first.set_idle(7.0)
    assert fallback.idle_seconds() == 7.0  # the first sensor is asked again each time
    both_fail = FallbackIdleSensor(
        [FixedIdleSensor(None, "no X display"), FixedIdleSensor(None, "no logind")]
    )
    assert both_fail.idle_seconds() is None
    assert both_fail.note == "no X display; no logind"
    both_fail.close()


def test_a_failing_sensor_becomes_a_note() -> None:
    class Broken(PolledIdleSensor):
        def read(self) -> Reading[float]:
            raise OSError("device went away")

    with Broken() as sensor:
        assert sensor.idle_seconds() is None
        assert sensor.note is not None
        assert "device went away" in sensor.note


def test_default_idle_sensor_answers_or_explains() -> None:
    sensor = default_idle_sensor()
    try:
        seconds = sensor.idle_seconds()
        assert (seconds is None) == (sensor.note is not None)
        assert seconds is None or seconds >= 0.0
    finally:
        sensor.close()


# ---- platform idle sensors


def test_x11_without_display_cannot_tell(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DISPLAY", raising=False)
    monkeypatch.delenv("WAYLAND_DISPLAY", raising=False)
    monkeypatch.delenv("XDG_SESSION_TYPE", raising=False)
    with X11IdleSensor() as sensor:
        assert sensor.idle_seconds() is None
        assert sensor.note is not None
        assert "DISPLAY" in sensor.note


def test_x11_declines_under_wayland(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DISPLAY", ":0")
    monkeypatch.setenv("WAYLAND_DISPLAY", "wayland-0")
    with X11IdleSensor() as sensor:
        assert sensor.idle_seconds() is None
        assert "Wayland" in (sensor.note or "")


def test_x11_with_an_unreachable_display_cannot_tell_and_waits_before_retrying(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("DISPLAY", ":987")  # no server listens there
    monkeypatch.delenv("WAYLAND_DISPLAY", raising=False)
    monkeypatch.delenv("XDG_SESSION_TYPE", raising=False)
    clock = FakeClock()
    with X11IdleSensor(retry_seconds=30.0, clock=clock) as sensor:
        assert sensor.idle_seconds() is None
        note = sensor.note
        assert note
        monkeypatch.setenv("DISPLAY", "")
        assert sensor.idle_seconds() is None
        assert sensor.note == note  # within the retry delay it does not try again
        clock.advance(31)
        assert sensor.idle_seconds() is None
        assert "DISPLAY" in (sensor.note or "")


@pytest.mark.skipif(shutil.which("Xvfb") is None, reason="needs Xvfb")
def test_x11_reads_a_real_server_and_survives_its_end(monkeypatch: pytest.MonkeyPatch) -> None:
    read_end, write_end = os.pipe()
    server = subprocess.Popen(
        ["Xvfb", "-displayfd", str(write_end), "-nolisten", "tcp"],
        pass_fds=(write_end,),
        stderr=subprocess.DEVNULL,
    )
    os.close(write_end)
    try:
        with os.fdopen(read_end) as ready:
            number = ready.readline().strip()  # Xvfb writes it once it accepts clients
        monkeypatch.setenv("DISPLAY", f":{number}")
        monkeypatch.delenv("WAYLAND_DISPLAY", raising=False)
        monkeypatch.delenv("XDG_SESSION_TYPE", raising=False)
        with X11IdleSensor() as sensor:
            seconds = sensor.idle_seconds()
            assert seconds is not None
            assert seconds >= 0.0
            server.terminate()
            server.wait(timeout=10)
            # Xlib would exit() the process on the dead connection; the sensor must notice first
            assert sensor.idle_seconds() is None
            assert "closed" in (sensor.note or "")
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()


@pytest.mark.skipif(sys.platform == "win32", reason="checks the non-Windows answer")
def test_windows_sensor_elsewhere_cannot_tell() -> None:
    with WindowsIdleSensor() as sensor:
        assert sensor.idle_seconds() is None
        assert "Windows" in (sensor.note or "")


@pytest.mark.skipif(sys.platform == "darwin", reason="checks the non-macOS answer")
def test_macos_sensor_elsewhere_cannot_tell() -> None:
    with MacIdleSensor() as sensor:
        assert sensor.idle_seconds() is None
        assert "macOS" in (sensor.note or "")


def test_windows_tick_difference_survives_the_wrap_around() -> None:
    assert idle_milliseconds(5000, 2000) == 3000
    assert idle_milliseconds(100, 0xFFFFFF00) == 356


def test_macos_ioreg_output_is_parsed() -> None:
    output = (
        '    | |   "HIDKeyboardModifierMappingPairs" = ()\n'
        '    | |   "HIDIdleTime" = 2500000000\n'
        '    | |   "HIDPointerAcceleration" = 45056\n'
    )
    assert parse_hid_idle_time(output) == 2.5
    assert parse_hid_idle_time("nothing here") is None


LOGIND_IDLE = "IdleHint=yes\nIdleSinceHintMonotonic=5000000\n"


def test_logind_output_is_parsed() -> None:
    assert parse_properties("Display=c2\nName=ada\njunk\n") == {"Display": "c2", "Name": "ada"}
    assert idle_from_output("IdleHint=no\nIdleSinceHintMonotonic=0\n", 100.0) == Reading(0.0)
    assert idle_from_output(LOGIND_IDLE, 65.0) == Reading(60.0)
    assert idle_from_output(LOGIND_IDLE, 1.0) == Reading(0.0)  # clamped, never negative
    no_since = idle_from_output("IdleHint=yes\nIdleSinceHintMonotonic=0\n", 65.0)
    assert no_since.value is None
    assert no_since.note
    assert idle_from_output("", 65.0).value is None


def test_logind_without_loginctl_cannot_tell() -> None:
    with LogindIdleSensor(command="barnraise-no-such-loginctl") as sensor:
        assert sensor.idle_seconds() is None
        assert "barnraise-no-such-loginctl is not installed" in (sensor.note or "")


@pytest.mark.skipif(sys.platform == "win32", reason="the fake loginctl is a shell script")
def test_logind_asks_loginctl_for_the_graphical_session_and_caches(tmp_path: Path) -> None:
    calls = tmp_path / "calls"
    script = tmp_path / "fake-loginctl"
    script.write_text(
        "#!/bin/sh\n"
        f'echo "$@" >> "{calls}"\n'
        'if [ "$1" = show-user ]; then echo Display=c7; exit 0; fi\n'
        'if [ "$2" = c7 ]; then echo IdleHint=yes; echo IdleSinceHintMonotonic=2000000; exit 0; fi\n'
        "echo 'no such session' >&2; exit 1\n"
    )
    script.chmod(0o755)
    clock = FakeClock(monotonic_start=12.0)
    with LogindIdleSensor(command=str(script), cache_seconds=5.0, clock=clock) as sensor:
        assert sensor.idle_seconds() == pytest.approx(10.0)
        clock.advance(3)
        assert sensor.idle_seconds() == pytest.approx(13.0)  # from the cache, aged
        assert len(calls.read_text().splitlines()) == 2
        clock.advance(3)
        assert sensor.idle_seconds() == pytest.approx(16.0)
    lines = calls.read_text().splitlines()
    assert lines[0].startswith("show-user")
    assert lines[1:] == ["show-session c7 -p IdleHint -p IdleSinceHintMonotonic"] * 2


# ---- system and GPU


def test_system_sensor_gives_plausible_values() -> None:
    sensor = SystemSensor()
    first = sensor.read()
    if first.other_cpu_percent is None:
        assert any("measuring" in note for note in first.notes)
    time.sleep(0.25)  # CPU use is measured over a span of time (at least 0.1 s)
    second = sensor.read()
    assert isinstance(second.other_cpu_percent, float)
    assert 0.0 <= second.other_cpu_percent <= 100.0
    assert second.available_memory_mb is not None
    assert second.available_memory_mb > 0
    assert second.cpu_count >= 1


@pytest.mark.parametrize(
    ("battery", "on_battery", "fragment"),
    [
        (None, None, "no battery"),
        (SimpleNamespace(percent=55.0, secsleft=0, power_plugged=None), None, "charger"),
        (SimpleNamespace(percent=55.0, secsleft=0, power_plugged=False), True, None),
        (SimpleNamespace(percent=90.0, secsleft=0, power_plugged=True), False, None),
    ],
    ids=["no battery", "charger unknown", "on battery", "plugged in"],
)
def test_system_sensor_battery(
    monkeypatch: pytest.MonkeyPatch, battery: Any, on_battery: bool | None, fragment: str | None
) -> None:
    monkeypatch.setattr(psutil, "sensors_battery", lambda: battery)
    state = SystemSensor().read()
    assert state.on_battery is on_battery
    battery_notes = [note for note in state.notes if note.startswith("battery")]
    if fragment is None:
        assert battery_notes == []
        assert state.battery_percent == battery.percent
    else:
        assert len(battery_notes) == 1
        assert fragment in battery_notes[0]


def test_system_sensor_battery_error_is_a_note(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken() -> None:
        raise RuntimeError("ACPI is confused")

    monkeypatch.setattr(psutil, "sensors_battery", broken)
    state = SystemSensor().read()
    assert state.on_battery is None
    assert any("ACPI is confused" in note for note in state.notes)


def test_cpu_share_averages_over_the_window() -> None:
    window = CpuShareWindow(10.0)
    # 4 CPUs; other programs use one CPU fully, we use one more
    assert window.add(CpuSample(0.0, 0.0, 0.0), 4) is None
    assert window.add(CpuSample(1.0, 2.0, 1.0), 4) == pytest.approx(25.0)
    # a one-second spike of all four CPUs is diluted by the quiet seconds before it
    for t in range(2, 10):
        window.add(CpuSample(float(t), 2.0 * t, float(t)), 4)
    spike = window.add(CpuSample(10.0, 18.0 + 4.0, 10.0), 4)
    assert spike == pytest.approx((9 * 1.0 + 3.0) / (10 * 4) * 100)
    # long after, only the last ten seconds count, and memory stays bounded
    for t in range(11, 1000):
        window.add(CpuSample(float(t), 22.0 + 2.0 * (t - 10), 10.0 + (t - 10)), 4)
    assert window.add(CpuSample(1000.0, 22.0 + 2.0 * 990, 10.0 + 990), 4) == pytest.approx(25.0)
    assert len(window._samples) <= 22


def test_cpu_share_clamps_and_survives_a_clock_going_back() -> None:
    window = CpuShareWindow(10.0)
    window.add(CpuSample(5.0, 10.0, 0.0), 2)
    assert window.add(CpuSample(6.0, 10.0, 1.0), 2) == 0.0  # our time counted before the machine's
    assert window.add(CpuSample(1.0, 20.0, 1.0), 2) is None
    assert window.add(CpuSample(2.0, 30.0, 1.0), 2) == 100.0


def test_gpu_sensor_without_torch_cannot_tell(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delitem(sys.modules, "torch", raising=False)
    reading = GpuSensor().read()
    assert reading.value is None
    assert "torch" in (reading.note or "")
    assert "torch" not in sys.modules  # and it did not import it


def fake_torch(*, available: bool = True, initialized: bool = True, temperature: Any = 70) -> Any:
    def read_temperature(device: int) -> int:
        if isinstance(temperature, Exception):
            raise temperature
        return int(temperature)

    cuda = SimpleNamespace(
        is_available=lambda: available,
        is_initialized=lambda: initialized,
        current_device=lambda: 0,
        mem_get_info=lambda device: (2 * 1024**3, 8 * 1024**3),
        temperature=read_temperature,
    )
    return SimpleNamespace(cuda=cuda)


def test_gpu_sensor_reads_a_loaded_torch(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "torch", fake_torch())
    assert GpuSensor().read() == Reading(GpuState(2048.0, 8192.0, 70.0))


@pytest.mark.parametrize(
    ("torch", "fragment"),
    [
        (fake_torch(available=False), "no CUDA GPU"),
        (fake_torch(initialized=False), "not started"),
    ],
    ids=["no GPU", "CUDA not started"],
)
def test_gpu_sensor_cannot_tell(monkeypatch: pytest.MonkeyPatch, torch: Any, fragment: str) -> None:
    monkeypatch.setitem(sys.modules, "torch", torch)
    reading = GpuSensor().read()
    assert reading.value is None
    assert fragment in (reading.note or "")


def test_gpu_temperature_failure_is_remembered(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "torch", fake_torch(temperature=ModuleNotFoundError("pynvml")))
    sensor = GpuSensor()
    assert sensor.read() == Reading(GpuState(2048.0, 8192.0, None))
    assert "pynvml" in (sensor.temperature_note or "")


# ---- the sampler


def test_sampler_collects_readings_and_notes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delitem(sys.modules, "torch", raising=False)
    sampler = ConditionSampler(
        FixedIdleSensor(None, "no X display"), SystemSensor(), GpuSensor(), headless=False
    )
    conditions = sampler.sample(
        uses_gpu=True,
        has_project=True,
        user_paused=True,
        snoozed_until=123.0,
        network_mb_this_month=42.0,
    )
    sampler.close()
    assert conditions.idle_seconds is None
    assert conditions.gpu is None
    assert (conditions.user_paused, conditions.snoozed_until) == (True, 123.0)
    assert conditions.network_mb_this_month == 42.0
    assert any("no X display" in note for note in conditions.notes)
    assert any(note.startswith("GPU:") for note in conditions.notes)


def test_sampler_leaves_out_what_does_not_apply(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delitem(sys.modules, "torch", raising=False)
    idle = ScriptedIdleSensor(clock=FakeClock())
    idle.set_unknown("should not be asked")
    sampler = ConditionSampler(idle, SystemSensor(), GpuSensor(), headless=True)
    conditions = sampler.sample(
        uses_gpu=False,
        has_project=False,
        user_paused=False,
        snoozed_until=None,
        network_mb_this_month=0.0,
    )
    assert conditions.headless
    assert conditions.idle_seconds is None
    assert not any(
        "should not be asked" in note or note.startswith("GPU") for note in conditions.notes
    )
