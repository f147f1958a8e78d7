# check_lib_deps.cmake - libchatterbox (cbx) holds only what synthesis
# needs: run as a test with
#   cmake -DLIB=<libcbx.a> -DEXE=<a program linked to cbx alone> -P check_lib_deps.cmake
# Fails when the archive references or defines anything of the tools (libcurl,
# libmicrohttpd, the downloader, the synthetic-checkpoint and .pt writers),
# or when the program records libcurl/libmicrohttpd as a dynamic dependency.
find_program(NM nm REQUIRED)
find_program(READELF readelf REQUIRED)
execute_process(COMMAND ${NM} -u ${LIB} OUTPUT_VARIABLE undef RESULT_VARIABLE rc ERROR_QUIET)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "nm -u ${LIB} failed (${rc})")
endif()
execute_process(COMMAND ${NM} --defined-only ${LIB} OUTPUT_VARIABLE def RESULT_VARIABLE rc ERROR_QUIET)
set(bad "")
string(REGEX MATCHALL "[ \t]U (curl_[A-Za-z0-9_]*|MHD_[A-Za-z0-9_]*)" hits "${undef}")
list(APPEND bad ${hits})
string(REGEX MATCHALL " T (io_pt_write[A-Za-z0-9_]*|synth_[A-Za-z0-9_]*|hf_[A-Za-z0-9_]*)" hits "${def}")
list(APPEND bad ${hits})
execute_process(COMMAND ${READELF} -d ${EXE} OUTPUT_VARIABLE dyn RESULT_VARIABLE rc ERROR_QUIET)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "readelf -d ${EXE} failed (${rc})")
endif()
string(REGEX MATCHALL "NEEDED[^\n]*(libcurl|libmicrohttpd)[^\n]*" hits "${dyn}")
list(APPEND bad ${hits})
if(bad)
  list(REMOVE_DUPLICATES bad)
  string(REPLACE ";" "\n  " bad "${bad}")
  message(FATAL_ERROR "libchatterbox pulls in tool code or libraries:\n  ${bad}")
endif()
string(REGEX MATCHALL "NEEDED[^\n]*" needed "${dyn}")
list(LENGTH needed n)
message(STATUS "${LIB}: no curl/microhttpd references, no downloader or writers; ${EXE}: ${n} NEEDED entries, none of them libcurl or libmicrohttpd")
