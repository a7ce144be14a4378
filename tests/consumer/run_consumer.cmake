# ctest driver: install the build tree into a scratch prefix, then configure, build and run a
# project outside the tree (SOURCE_DIR: tests/consumer, examples/own_model) against it with
# find_package(diloco). PROGRAM names its executable (default consumer), PROGRAM_ARGS its
# arguments.
if(NOT PROGRAM)
  set(PROGRAM consumer)
endif()
file(REMOVE_RECURSE "${WORK_DIR}")
function(step)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "consumer step failed (${rc}): ${ARGN}")
  endif()
endfunction()
step(${CMAKE_COMMAND} --install "${BUILD_DIR}" --prefix "${WORK_DIR}/prefix")
step(${CMAKE_COMMAND} -S "${SOURCE_DIR}" -B "${WORK_DIR}/build" -DCMAKE_PREFIX_PATH=${WORK_DIR}/prefix
     -DCMAKE_BUILD_TYPE=Release)
step(${CMAKE_COMMAND} --build "${WORK_DIR}/build" -j 2)
step("${WORK_DIR}/build/${PROGRAM}" ${PROGRAM_ARGS})
