# ctest: fails when an executable of src/ or bench/ has no link-closure test
# (headroom_links_none_of, cmake/LinkClosure.cmake). UNCHECKED_FILE: their names, written at
# configure time.
file(READ ${UNCHECKED_FILE} unchecked)
string(STRIP "${unchecked}" unchecked)
if(unchecked)
  message(FATAL_ERROR "no link-closure test for: ${unchecked} (add headroom_links_none_of)")
endif()
message(STATUS "every executable of src/ and bench/ has a link-closure test")
