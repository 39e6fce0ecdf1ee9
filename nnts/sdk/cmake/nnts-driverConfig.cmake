# nnts-driver, the native driver SDK of nnts, as a CMake package:
#   find_package(nnts-driver CONFIG REQUIRED PATHS "$(nnts sdk --cmake-dir)")
#   target_link_libraries(my_driver PRIVATE nnts::driver)
# The library is built from the sources the wheel ships, by the project's own compiler.
get_filename_component(_nnts_driver_root "${CMAKE_CURRENT_LIST_DIR}/.." ABSOLUTE)
if(NOT TARGET nnts::driver)
  find_package(Threads REQUIRED)
  add_library(nnts_driver STATIC
    "${_nnts_driver_root}/src/server.cpp"
    "${_nnts_driver_root}/src/transport.cpp"
    "${_nnts_driver_root}/src/c_driver.cpp")
  add_library(nnts::driver ALIAS nnts_driver)
  target_include_directories(nnts_driver PUBLIC "${_nnts_driver_root}/include")
  target_compile_features(nnts_driver PUBLIC cxx_std_17)
  set_target_properties(nnts_driver PROPERTIES CXX_EXTENSIONS OFF POSITION_INDEPENDENT_CODE ON)
  target_link_libraries(nnts_driver PUBLIC Threads::Threads)
endif()
set(nnts-driver_FOUND TRUE)
