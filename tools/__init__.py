"""Repository tooling, not part of the package: release (wheels, sdist, cross-target checks), the
docs site's mkdocs hooks, and the progress line shown in tmux for a person to look at."""
