"""Sphinx configuration of the rendered course (`make book`, docs/book.md).

docs/book/build.py lays out the source tree (README, the course map, docs/, bench/, and the executed copies
of the notebooks the nbval run left in build/executed/) and runs Sphinx on it with this file; nothing is
executed here (nb_execution_mode "off"): the outputs are those the notebooks received under nbval.
"""

project = "agentlab"
author = "agentlab"
root_doc = "README"
extensions = ["myst_nb"]
exclude_patterns = ["_build", "**.ipynb_checkpoints"]

# -- MyST: the Markdown the docs and notebooks use
myst_enable_extensions = ["dollarmath", "amsmath", "colon_fence"]
myst_heading_anchors = 3  # links such as docs/guide.md#on-a-gpu resolve to the heading
nb_execution_mode = "off"
nb_merge_streams = True
nb_output_stderr = "show"

# Warnings fail the build (build.py passes -W): a link to a page that is not there, a malformed directive.
# Not a failure: a code block that Pygments cannot lex strictly (docs/measurements.md shows JSON with "...").
suppress_warnings = ["misc.highlighting_failure"]

# -- HTML
html_theme = "sphinx_book_theme"
html_title = "agentlab: multi-turn RL for LLM agents"
html_theme_options = {
    "show_navbar_depth": 1,
    "show_toc_level": 2,
    "use_download_button": True,
    "home_page_in_toc": True,
}
html_last_updated_fmt = None
html_copy_source = False
html_show_sourcelink = False
