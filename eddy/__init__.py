"""Shared foundations of Eddy that every layer may import (errors)."""
