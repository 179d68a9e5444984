# QUARTET_CUDA (AUTO, ON, OFF) decides whether the CUDA backend is built. The backend
# itself arrives with the CUDA issue; until then a cuda device is refused at run time
# with a clear message, and ON fails here rather than pretending.
set(QUARTET_WITH_CUDA OFF)
if(QUARTET_CUDA STREQUAL "ON")
  message(FATAL_ERROR "QUARTET_CUDA=ON: this version of Quartet has no CUDA backend yet")
endif()
message(STATUS "quartet: CUDA backend ${QUARTET_WITH_CUDA}")
