"""Release tooling for loaderx (wheels, sdist, cross-target checks) and the progress line shown in
tmux for a person to look at; not part of the package."""
