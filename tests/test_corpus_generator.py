"""The corpus is what its generator makes: cts/corpus/generate.py, run into a fresh folder, writes
every committed family file byte for byte (the generator is deterministic, its families run in
their fixed order)."""
import subprocess
import sys
from pathlib import Path

CORPUS = Path(__file__).resolve().parent.parent / "cts" / "corpus"


def test_the_generator_writes_the_committed_corpus(tmp_path):
    code = ("import sys; sys.path.insert(0, sys.argv[1]); import generate; generate.main(sys.argv[2])")
    subprocess.run([sys.executable, "-c", code, str(CORPUS), str(tmp_path)], check=True, capture_output=True)
    written = sorted(p.name for p in tmp_path.glob("*.json"))
    generated = sorted(p.name for p in CORPUS.glob("*.json")
                       if '"source":"nnts/cts/corpus/generate.py' in p.read_text(encoding="utf-8")[:200])
    assert written == generated and len(written) >= 20
    for name in written:
        assert (tmp_path / name).read_bytes() == (CORPUS / name).read_bytes(), name
