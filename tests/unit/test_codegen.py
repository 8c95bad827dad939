"""The check that the committed gRPC code in bluedove/v1/ is what proto/ generates can fail.
(That it passes today, by running the script: tests/integration/test_codegen_script.py.)"""

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_check_detects_a_stale_file(tmp_path):
    """The check itself can fail: a changed proto no longer matches the committed code."""
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        import gen_proto
    finally:
        sys.path.pop(0)
    proto_root = tmp_path / "proto"
    (proto_root / "bluedove" / "v1").mkdir(parents=True)
    src = (ROOT / "proto" / "bluedove" / "v1" / "matcher.proto").read_text()
    (proto_root / "bluedove" / "v1" / "matcher.proto").write_text(src.replace("int32 changed = 1;",
                                                                              "int64 changed = 1;"))
    assert gen_proto.check(proto_root) == 1
