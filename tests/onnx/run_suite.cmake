# Runs the conformance runner over every case folder of DATA, failing when
# a case listed in EXPECT does not pass. DEVICE (default cpu) is where.
if(NOT DEVICE)
  set(DEVICE cpu)
endif()
file(GLOB cases LIST_DIRECTORIES true ${DATA}/test_*)
execute_process(COMMAND ${RUNNER} --quiet --device ${DEVICE} --expect ${EXPECT} ${cases}
  RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "onnx conformance: expected passes regressed")
endif()
