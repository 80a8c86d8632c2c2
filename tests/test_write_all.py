"""Documents are written in chunks: one write(2) call takes at most ~2 GiB on Linux, and a text
stream silently drops what a larger call leaves (a 2 GiB + 10 byte JSON lost its end)."""

import io
import json

from conftest import SAMPLES

from attncli.render import out


class Recording(io.StringIO):
    def __init__(self):
        super().__init__()
        self.sizes = []

    def write(self, text):
        self.sizes.append(len(text))
        return super().write(text)


def test_write_all_splits_into_chunks_and_loses_nothing(monkeypatch):
    monkeypatch.setattr(out, "CHUNK", 4)
    stream = Recording()
    out.write_all("abcdefghij", stream)
    assert stream.getvalue() == "abcdefghij" and stream.sizes == [4, 4, 2]
    binary = io.BytesIO()
    out.write_all(b"0123456789", binary)
    assert binary.getvalue() == b"0123456789"


def test_compute_and_output_files_go_through_write_all(run, monkeypatch, tmp_path):
    whole = run("compute", SAMPLES / "scooter.json", "-f", "json").stdout
    calls = []
    real = out.write_all
    monkeypatch.setattr(out, "CHUNK", 7)
    monkeypatch.setattr(out, "write_all", lambda text, stream=None: (calls.append(len(text)), real(text, stream)))
    assert run("compute", SAMPLES / "scooter.json", "-f", "json").stdout == whole
    target = tmp_path / "t.json"
    assert run("compute", SAMPLES / "scooter.json", "-o", target).exit_code == 0
    assert json.loads(target.read_text()) == json.loads(whole)
    assert len(calls) == 2
