"""FastLoader's face: the class and factory, the loader paths and their typed options (declared
once, in paths.py), the checks and refusals of arguments, and what every loader implements. May
import loader/order/, loader/pipeline/ and loader/images/."""
