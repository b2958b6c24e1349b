# The two commands of the README: `make demo` and `make test`. Each sets up everything it needs
# on a fresh Debian/Ubuntu machine with Python 3.11+ (venv, package, mosquitto), then runs.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
SUDO   := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: demo test test-stress test-cluster bench check setup mosquitto ejabberd clean

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

# ejabberd (its mod_mqtt speaks MQTT 5) is the second broker: `make test-cluster` runs tests/cluster/ against
# a 2-node ejabberd cluster the tests start themselves. The package's postinst starts a system ejabberd
# (idle, ~13% of a core) under systemd: it is stopped and disabled, as the tests run their own nodes. Without
# systemd (a container) policy-rc.d usually keeps it from starting; if it runs anyway (as user ejabberd),
# it is stopped (`ejabberdctl stopped` also stops the epmd it started). `ejabberdctl stop` is not run
# otherwise: with no node up it would leave an epmd daemon behind.
ejabberd:
	@if command -v ejabberdctl >/dev/null 2>&1 || [ -x /usr/sbin/ejabberdctl ]; then :; else \
	  echo "installing ejabberd with apt-get"; \
	  $(SUDO) apt-get update -qq && $(SUDO) DEBIAN_FRONTEND=noninteractive apt-get install -y -qq ejabberd; \
	  if command -v systemctl >/dev/null 2>&1 && [ -d /run/systemd/system ]; then \
	    $(SUDO) systemctl disable --now ejabberd >/dev/null 2>&1 || true; \
	  elif pgrep -u ejabberd -x beam.smp >/dev/null 2>&1; then \
	    $(SUDO) /usr/sbin/ejabberdctl stop >/dev/null 2>&1; $(SUDO) /usr/sbin/ejabberdctl stopped >/dev/null 2>&1 || true; \
	  fi; \
	fi

demo: setup
	$(BIN)/broker-mqtt demo

test: setup
	$(BIN)/python -m pytest

# The integration tests across a 2-node ejabberd cluster (marked `cluster`; skipped by `make test` when
# ejabberd is not installed).
test-cluster: setup ejabberd
	$(BIN)/python -m pytest -m cluster -p no:cacheprovider tests/cluster

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
