# Two commands set everything up on a fresh clone: `make demo` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test test-fast bench docs schemas pictures clean

# pip compiles every module it installs (about 40,000: half the install's time); only those imported are compiled
# here, by importing the frameworks once; the rest compile if and when they are first imported.
$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet --no-compile -e '.[cpu,test]'
	env -u PYTHONDONTWRITEBYTECODE $(BIN)/python -c "import tensorflow, torch.distributed.run" 2>/dev/null \
		|| env -u PYTHONDONTWRITEBYTECODE $(BIN)/python -c "import tensorflow, torch.distributed.run"
	touch $(STAMP)

# The default NMT model (4 layers, 512 units, batch 64, lengths 50) on 1 and 2 devices as a speedup
# table; 1 warm-up and 4 timed batches keep it to about 2 minutes on 2 CPU cores.
demo: $(STAMP)
	$(BIN)/rnnprof scale --model nmt --devices 1,2 --warmup 1 --batches 4

# Three workers (pytest-xdist), each test module on one of them (tests/conftest.py): a third fills the time the
# other two wait on their jobs' processes. TEST_WORKERS=0 runs in this process, one test after another.
# The suite starts ~600 Python processes: with PYTHONDONTWRITEBYTECODE set, each one compiled rnnprof's modules
# from source again, and each worker rewrote every test module's asserts. The bytecode goes to __pycache__.
TEST_WORKERS ?= 3
PYTEST := env -u PYTHONDONTWRITEBYTECODE $(BIN)/python -m pytest
test: $(STAMP)
	$(PYTEST) -q -n $(TEST_WORKERS) --dist loadfile

# Everything but the tests that run real TensorFlow training or capture.
test-fast: $(STAMP)
	$(PYTEST) -q -n $(TEST_WORKERS) --dist loadfile -m "not slow"

# The documentation site (Sphinx, Markdown pages through MyST, the CLI reference from the parsers);
# warnings are errors.
docs: schemas
	$(BIN)/python -m sphinx -W --keep-going -q -b html docs docs/_build/html

# The JSON Schemas of the --json documents, from their types (docs/json.md).
schemas: $(STAMP)
	$(BIN)/python docs/schemas/generate.py

# The pictures in docs/ from the current code (docs/pictures.py; needs chromium; a sweep of a few minutes).
pictures: $(STAMP)
	$(BIN)/python docs/pictures.py

bench: $(STAMP)
	for b in benchmarks/[!_]*.py; do $(BIN)/python $$b || exit 1; done
	$(BIN)/python benchmarks/whole_job.py --3d

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache docs/_build
