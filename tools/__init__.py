"""Release tooling for loaderx (wheels, sdist, cross-target checks); not part of the package."""
