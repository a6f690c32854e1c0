"""Regenerate the README's figures from the real quickstart FDG.

python docs/make_figures.py
"""

from pathlib import Path

from workbench.algorithms import ppo
from workbench.fdg.render import render_svg

HERE = Path(__file__).parent

if __name__ == "__main__":
    (HERE / "fdg_quickstart.svg").write_text(render_svg(ppo.build_fdg()))
    print("wrote", HERE / "fdg_quickstart.svg")
