# The two commands of the README: `make demo` and `make test`. Each sets up everything it needs
# on a fresh Debian/Ubuntu machine with Python 3.11+ (venv, package, mosquitto), then runs.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
SUDO   := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: demo test test-stress bench check setup mosquitto clean

setup: $(STAMP) mosquitto

$(STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "broker-mqtt needs Python 3.11 or newer")'
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[dev,spark]'
	touch $@

# mosquitto is the embedded broker: installed from the distribution when it is missing.
mosquitto:
	@if command -v mosquitto >/dev/null 2>&1 || [ -x /usr/sbin/mosquitto ]; then :; else \
	  echo "installing mosquitto with apt-get"; \
	  $(SUDO) apt-get update -qq && $(SUDO) DEBIAN_FRONTEND=noninteractive apt-get install -y -qq mosquitto; \
	fi

demo: setup
	$(BIN)/broker-mqtt demo

test: setup
	$(BIN)/python -m pytest

# The suite with one core kept busy by another process, STRESS_RUNS times in a row (stops at the first
# failure; prints each run's wall time and the slowest tests): what a busy CI machine does to it.
STRESS_RUNS ?= 3
test-stress: setup
	$(BIN)/python .ci/stress.py --runs $(STRESS_RUNS) -- $(BIN)/python -m pytest -p no:cacheprovider --durations=15

# Lint and types: ruff over all the code, mypy (strict, see [tool.mypy] in pyproject.toml) over both packages.
check: setup
	$(BIN)/ruff check broker_mqtt asyncactor bench tests examples
	$(BIN)/python -m mypy broker_mqtt asyncactor

bench: setup
	$(BIN)/python bench/pubsub.py

clean:
	rm -rf .venv .venv-3.* build *.egg-info bench/results
