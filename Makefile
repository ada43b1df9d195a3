# tidemark: `make serve` runs a broker, `make test` runs the whole suite. Both set up what they need.

VENV ?= .venv
PYTHON ?= python3
BIN := $(VENV)/bin
LISTEN ?= 127.0.0.1:9092
DATA_DIR ?= tidemark-data
# Root installs Debian packages directly; anyone else goes through sudo.
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: install system-deps serve cluster test demo bench clean

install: $(VENV)/.installed

# setup.py builds tidemark.records._speedups: a changed C source reinstalls (and rebuilds) it.
$(VENV)/.installed: pyproject.toml setup.py src/tidemark/records/_speedups.c
	@command -v cc >/dev/null 2>&1 || { $(SUDO) apt-get update -qq && $(SUDO) apt-get install -y -qq gcc >/dev/null; }
	@$(PYTHON) -c "import os, sys, sysconfig; sys.exit(not os.path.exists(os.path.join(sysconfig.get_paths()['include'], 'Python.h')))" \
		|| { $(SUDO) apt-get update -qq && $(SUDO) apt-get install -y -qq python3-dev >/dev/null; }
	@[ -x $(BIN)/python ] || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --disable-pip-version-check -e '.[test]'
	@touch $@

# Debian packages the tests drive as real peers: kcat, Burrow, and ZooKeeper (its server jar,
# started by the tests themselves on a free port; the packages' own services are not needed).
ZOOKEEPER_JAR ?= /usr/share/java/zookeeper.jar
system-deps:
	@command -v kcat >/dev/null 2>&1 || { $(SUDO) apt-get update -qq && $(SUDO) apt-get install -y -qq kcat >/dev/null; }
	@[ -f $(ZOOKEEPER_JAR) ] || { $(SUDO) apt-get update -qq && $(SUDO) apt-get install -y -qq zookeeperd >/dev/null; }
	@command -v Burrow >/dev/null 2>&1 || { $(SUDO) apt-get update -qq && $(SUDO) apt-get install -y -qq burrow >/dev/null; }

serve: install
	$(BIN)/tidemark serve --listen $(LISTEN) --data-dir $(DATA_DIR)

# ZooKeeper and three brokers on 127.0.0.1:9092-9094 (data under ./tidemark-cluster); Ctrl-C stops all.
# `make cluster FIRST_PORT=19092 ZK_PORT=12181` moves them; a port in use stops it before it starts.
FIRST_PORT ?= 9092
ZK_PORT ?= 2181
cluster: install system-deps
	$(BIN)/tidemark cluster run --brokers 3 --first-port $(FIRST_PORT) --zookeeper-port $(ZK_PORT) --dir tidemark-cluster

test: install system-deps
	$(BIN)/pytest -q

# A PySpark streaming pipeline on a throwaway broker: stopped halfway, restarted, lag 0 at the end.
demo: install
	$(BIN)/python -m demo.pipeline

bench: install
	$(BIN)/python -m bench.produce_fetch
	$(BIN)/python -m bench.offsets
	$(BIN)/python -m bench.cleaner
	$(BIN)/python -m bench.spark_source
	$(BIN)/python -m bench.spark_cluster
	$(BIN)/python -m bench.offsets_log_spark
	$(BIN)/python -m bench.restart
	$(BIN)/python -m bench.zk_offsets
	$(BIN)/python -m bench.quotas
	$(BIN)/python -m bench.transactions
	$(BIN)/python -m bench.commit_path
	$(BIN)/python -m bench.log_append
	$(BIN)/python -m bench.request_path
	$(BIN)/python -m bench.validation
	$(BIN)/python -m bench.producer_ids
	$(BIN)/python -m bench.floods
	$(BIN)/python -m bench.coordinator_timers
	$(BIN)/python -m bench.consumer_protocol
	$(BIN)/python -m bench.groups_describe
	$(BIN)/python -m bench.cluster
	$(BIN)/python -m bench.coordinator
	$(BIN)/python -m bench.multicore

clean:
	rm -rf $(VENV) build src/*.egg-info .pytest_cache .hypothesis src/tidemark/records/*.so
