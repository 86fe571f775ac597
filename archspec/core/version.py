"""archspec's version (archspec.__version__), here so that what prints it (`archspec --version`,
build manifests) needs nothing above the core."""

__version__ = "0.1.0"
