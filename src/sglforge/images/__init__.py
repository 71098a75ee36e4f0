"""What ``images/`` (the overlay Dockerfile and the targets) becomes: the overlay image itself.

``sglforge.images.oci`` writes the overlay as an OCI image, a pure function of its inputs.
"""
