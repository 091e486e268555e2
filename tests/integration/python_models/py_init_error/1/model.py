"""initialize() raises: the load fails with the exception's text."""


class TritonPythonModel:
    def initialize(self, args):
        raise RuntimeError("cannot initialize " + args["model_name"])

    def execute(self, requests):
        return []
