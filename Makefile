# Two commands do all set-up: `make run` opens the explorer on sample_vault, `make test` runs the tests.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
VAULT ?= sample_vault
TORCH := torch==2.13.0

.PHONY: run test bench-quality bench-speed clean-venv

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@# The CPU build of torch first, so nothing below pulls a CUDA build.
	$(BIN)/pip install --quiet --disable-pip-version-check $(TORCH)
	$(BIN)/pip install --quiet --disable-pip-version-check -e '.[dev,milvus]' $(TORCH)
	@touch $(STAMP)

run: $(STAMP)
	$(BIN)/explorer $(VAULT)

# Three processes on the machine's two cores, each taking a whole test file, so a file's fixtures are built
# once: many files mostly wait on processes they start (engines, servers, commands), and the third process
# keeps both cores busy meanwhile.
test: $(STAMP)
	$(BIN)/python -m pytest -q -n 3 --dist loadfile

bench-quality: $(STAMP)
	$(BIN)/python -m benchmarks.quality --dataset ../shared/bench/scifact

bench-speed: $(STAMP)
	$(BIN)/python -m benchmarks.speed

clean-venv:
	rm -rf $(VENV)
