# headroom_history_bench (coordinator_history.cc), in a file of its own: `make
# bench-hostile-coordinator` also builds it against the coordinator as it was before issue 53.
add_executable(headroom_history_bench EXCLUDE_FROM_ALL ${CMAKE_CURRENT_LIST_DIR}/coordinator_history.cc)
target_link_libraries(headroom_history_bench PRIVATE headroom_coord headroom_coord_server
                      PkgConfig::HTTPLIB_BENCH nlohmann_json::nlohmann_json fmt::fmt CLI11::CLI11
                      headroom_warnings)
