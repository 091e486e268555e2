"""O_<T> = I_<T>, checking that numpy sees the configured datatype."""
import json

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        self.types = {io["name"][2:]: pb_utils.triton_string_to_numpy(io["data_type"])
                      for io in config["input"]}

    def execute(self, requests):
        responses = []
        for request in requests:
            outputs = []
            for tensor in request.inputs():
                array = tensor.as_numpy()
                suffix = tensor.name()[2:]
                assert array.dtype == self.types[suffix], (array.dtype, suffix)
                outputs.append(pb_utils.Tensor("O_" + suffix, array))
            responses.append(pb_utils.InferenceResponse(outputs))
        return responses
