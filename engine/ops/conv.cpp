// placeholder while the convolution lands
