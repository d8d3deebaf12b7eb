"""Where frames come from and where they are shown: image/folder/list/glob sources, cameras and
stream URLs (live), video reading and writing through OpenCV, Network.stream's frame iterator, and
the --show window."""
