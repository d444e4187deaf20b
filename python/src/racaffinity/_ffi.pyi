# Type stub of the cffi module the build writes from include/racaffinity.h.
from typing import Any

ffi: Any
