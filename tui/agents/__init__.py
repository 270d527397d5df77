"""The agents view: pause and resume agents."""
