"""The committed gRPC code in bluedove/v1/ is what proto/ generates today."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_generated_code_is_current():
    r = subprocess.run([sys.executable, str(ROOT / "scripts" / "gen_proto.py"), "--check"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


def test_check_detects_a_stale_file(tmp_path, monkeypatch):
    """The check itself can fail: a changed proto no longer matches the committed code."""
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        import gen_proto
    finally:
        sys.path.pop(0)
    proto_root = tmp_path / "proto"
    (proto_root / "bluedove" / "v1").mkdir(parents=True)
    src = (ROOT / "proto" / "bluedove" / "v1" / "matcher.proto").read_text()
    (proto_root / "bluedove" / "v1" / "matcher.proto").write_text(src.replace("int32 changed = 1;", "int64 changed = 1;"))
    monkeypatch.setattr(gen_proto, "PROTO_DIR", proto_root)
    monkeypatch.setattr(sys, "argv", ["gen_proto.py", "--check"])
    assert gen_proto.main() == 1
