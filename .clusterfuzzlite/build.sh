#!/bin/bash -eu
# ClusterFuzzLite / OSS-Fuzz build: one fuzz target per harness of fuzz/harnesses.py
# (fuzz/<name>_fuzzer.py), packaged with compile_python_fuzzer, each with a seed corpus of one
# input per test model (the same seeds `nnts fuzz` uses). Runs inside the base-builder-python
# image ($SRC/nnts is the checkout; see Dockerfile).
cd "$SRC/nnts"
pip3 install .
for fuzzer in fuzz/*_fuzzer.py; do
  name=$(basename "$fuzzer" .py)
  compile_python_fuzzer "$fuzzer" --add-data cts/corpus:nnts/cts/corpus
  python3 -c "import sys; from nnts.fuzz.engine import seed_corpus_zip; seed_corpus_zip(*sys.argv[1:])" \
    "${name%_fuzzer}" "$OUT/${name}_seed_corpus.zip" cts/corpus
done
