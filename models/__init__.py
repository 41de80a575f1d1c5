"""What is decided: configs, requests, plans, the cost model and the CP-SAT model builder."""
from models.config import Config, load_config
from models.requests import Requests, load_requests

__all__ = ["Config", "Requests", "load_config", "load_requests"]
