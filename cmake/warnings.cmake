# Warnings for Quartet's own code: -Wall -Wextra on every target the folders define (the
# libraries and binaries, the tests and bench, and the moc output compiled into gui's
# targets); QUARTET_WERROR=ON (CI) makes them errors. Included after the find_package
# calls, so their probes are untouched, and before the folders are added. No third-party
# code is compiled in this tree (it comes from Debian packages as imported targets); a
# dependency ever built here must be added before this file is included.
option(QUARTET_WERROR "Treat warnings in Quartet's own code as errors" OFF)
add_compile_options($<$<COMPILE_LANGUAGE:CXX>:-Wall> $<$<COMPILE_LANGUAGE:CXX>:-Wextra>)
# Initialises each target's COMPILE_WARNING_AS_ERROR; `cmake --compile-no-warning-as-error`
# overrides it for one build.
set(CMAKE_COMPILE_WARNING_AS_ERROR ${QUARTET_WERROR})
