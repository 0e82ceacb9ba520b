"""envcfg: KEY=value configuration files with typed access."""

from envcfg.config import Config, load
from envcfg.parser import parse_line
from envcfg.values import parse_bool

__all__ = ["Config", "load", "parse_bool", "parse_line"]
__version__ = "0.5.2"
